// linear_gelu on the CUDA backend: the GELU run in each GEMM's epilogue (gemm/epilogue.cuh, in
// simt_gemm.cu's tile and split-K sum, mma_gemm.cu's tensor-core tile, cublas_gemm.cu's epilogue
// kernel, and the K = 0 path) must give the bits of gelu(linear(x, w, b)) run as two ops on the
// same device, forward and backward: each epilogue evaluates gelu.cuh's expression on the
// pre-activation it has just rounded and stored, which is what the separate gelu kernel reads.
// Every GEMM implementation (native: the tensor-core kernel for 16 bits; simt; cublas) × dtype ×
// form, with shapes that take the SIMT kernel's vector and element stores, a K long enough for
// its split-K plan, tile edges in both directions, and K = 0. Against the CPU, the GEMM and GELU
// tests cover each op; here the check is that fusing changes nothing.
#include "cuda_test_util.h"

#include <string>
#include <vector>

#include "core/ops/gelu.h"
#include "core/ops/linear.h"
#include "kernels/cuda/gemm/gemm_plan.h"
#include "tests/same_bits.h"

using namespace minidl;
using namespace minidl::cuda_test;
using minidl::testing::check_same_bits;

namespace {

struct Problem {
  int64_t rows, in, out;
};

}  // namespace

TEST_CASE("CUDA linear_gelu gives the bits of gelu(linear(...)) on every GEMM, dtype and form", "[linear][gelu]") {
  const std::vector<Problem> problems = {
      {3, 5, 7},      // one partial tile, element stores
      {37, 70, 45},   // edges in M and N, odd N: element stores
      {70, 24, 64},   // N a multiple of 4: the SIMT kernel's vector stores
      {6, 1500, 10},  // small M·N, long K: the SIMT plan splits K (epilogue in the split-K sum)
      {4, 0, 6},      // K = 0: the epilogue alone, gelu(bias)
  };
  // The long-K problem must reach the split-K sum's epilogue, or this test would not cover it.
  REQUIRE(cuda::native_gemm_plan(6, 10, 1500, device_sm_count()).splits > 1);
  uint64_t seed = 100;
  for (GemmImpl impl : {GemmImpl::Native, GemmImpl::Simt, GemmImpl::Cublas}) {
    GemmImplScope scope(impl);
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
      for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh})
        for (const Problem& p : problems)
          for (bool with_bias : {true, false}) {
            const std::string what = std::string(gemm_impl_name(impl)) + " " + dtype_name(dtype) + " " +
                                     gelu_approximate_name(form) + " " + std::to_string(p.rows) + "x" +
                                     std::to_string(p.in) + "->" + std::to_string(p.out) + (with_bias ? " bias" : "");
            // Inputs over a few units: the GELU's curve and both tails. Each path gets leaves of
            // its own (clone), so neither shares storage with the other.
            const Tensor x0 = (random_cpu({p.rows, p.in}, ++seed, -2.0, 2.0)).to(dtype).to(kGpu);
            const Tensor w0 = (random_cpu({p.out, p.in}, ++seed, -0.5, 0.5)).to(dtype).to(kGpu);
            const Tensor b0 = with_bias ? random_cpu({p.out}, ++seed, -1.0, 1.0).to(dtype).to(kGpu) : Tensor();
            const Tensor dy = random_cpu({p.rows, p.out}, ++seed).to(dtype).to(kGpu);
            Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
            Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
            Tensor b = with_bias ? b0.clone().requires_grad_(true) : Tensor();
            Tensor br = with_bias ? b0.clone().requires_grad_(true) : Tensor();

            const Tensor y = ops::linear_gelu(x, w, b, form);
            const Tensor yr = ops::gelu(ops::linear(xr, wr, br), form);
            check_same_bits(y, yr, what + ": forward");
            y.backward(dy);
            yr.backward(dy);
            check_same_bits(x.grad(), xr.grad(), what + ": dx");
            check_same_bits(w.grad(), wr.grad(), what + ": dw");
            if (with_bias) check_same_bits(b.grad(), br.grad(), what + ": db");
          }
  }
}
