// Batched matmul on the CUDA backend (kernels/cuda/gemm/simt_gemm.cu's grid.z batches, cuBLAS's
// strided-batched GEMM) through ops::matmul, against the CPU on the same float32 inputs, for the
// native kernel and for cuBLAS: M, N, K that are not multiples of any tile, batch 1 and several,
// broadcast batch dims, transposed and narrowed views (read in place, without a copy: the
// caching allocator's peak says so), and the gradients through autograd.
// Tolerance: Note [GEMM tolerance] in test_cuda_gemm.cpp, |cuda − cpu| <= 1e-5·scale + 1e-6 with
// scale = |A|·|B| per output, the bound of a float32 dot product's rounding whatever the order.
#include "cuda_test_util.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/memory.h"
#include "kernels/cuda/gemm/gemm_impl.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

constexpr double kRel = 1e-5;  // Note [GEMM tolerance]
constexpr double kAbs = 1e-6;

const GemmImpl kImpls[] = {GemmImpl::Native, GemmImpl::Cublas};

Tensor abs_of(const Tensor& t) {
  std::vector<float> v = t.to(Device::cpu()).contiguous().to_vector<float>();
  for (float& x : v) x = std::abs(x);
  return from_vector(v, t.shape(), TensorOptions(DType::Float32, Device::cpu()));
}

// got (any device) within the GEMM tolerance of want (CPU), scale = the product of the absolute values.
void check_product(const Tensor& got, const Tensor& want, const Tensor& scale, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const std::vector<float> g = got.to(Device::cpu()).contiguous().to_vector<float>();
  const std::vector<float> w = want.contiguous().to_vector<float>();
  const std::vector<float> s = scale.contiguous().to_vector<float>();
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double excess = std::abs(static_cast<double>(g[i]) - w[i]) - (kRel * s[i] + kAbs);
    if (!(excess <= 0)) {
      ++bad;
      if (!(excess <= worst_excess)) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  INFO("element " << worst << ": cuda " << (g.empty() ? 0.f : g[worst]) << ", cpu " << (w.empty() ? 0.f : w[worst]));
  CHECK(bad == 0);
}

// a, b on the CPU (any strides); the same views are made on the device by `view` from copies.
void check_matmul(const Tensor& a, const Tensor& b, const Tensor& a_gpu, const Tensor& b_gpu, const std::string& what) {
  const Tensor want = ops::matmul(a, b);
  const Tensor scale = ops::matmul(abs_of(a), abs_of(b));
  for (GemmImpl impl : kImpls) {
    GemmImplScope scope(impl);
    const Tensor got = ops::matmul(a_gpu, b_gpu);
    check_product(got, want, scale, what + " impl=" + gemm_impl_name(impl));
  }
}

void check_matmul(const Tensor& a, const Tensor& b, const std::string& what) {
  const Tensor a_gpu = a.to(kGpu), b_gpu = b.to(kGpu);
  check_matmul(a, b, a_gpu, b_gpu, what);
}

std::string shape_text(const Tensor& a, const Tensor& b) {
  std::ostringstream os;
  os << a.shape() << " x " << b.shape();
  return os.str();
}

}  // namespace

TEST_CASE("cuda batched matmul matches the cpu on sizes off every tile, batch 1 and several", "[cuda][matmul]") {
  // (M, N, K): 17x33x65 and 37x70x19 cross the 32 tile's edges; 65x129x40 the 64 and 128 ones.
  const int64_t sizes[][3] = {{17, 33, 65}, {37, 70, 19}, {65, 129, 40}, {1, 5, 3}};
  uint64_t seed = 1;
  for (const auto& s : sizes) {
    for (const Shape& batch : {Shape{1}, Shape{3}, Shape{2, 3}}) {
      Shape sa = batch, sb = batch;
      sa.push_back(s[0]);
      sa.push_back(s[2]);
      sb.push_back(s[2]);
      sb.push_back(s[1]);
      const Tensor a = random_cpu(sa, seed++), b = random_cpu(sb, seed++);
      check_matmul(a, b, shape_text(a, b));
    }
  }
}

TEST_CASE("cuda batched matmul broadcasts batch dims like the cpu", "[cuda][matmul]") {
  const Tensor a = random_cpu({2, 1, 33, 20}, 11), b = random_cpu({3, 20, 35}, 12);
  check_matmul(a, b, "a [2, 1, M, K] x b [3, K, N]");
  const Tensor m = random_cpu({33, 20}, 13), bb = random_cpu({4, 20, 35}, 14);
  check_matmul(m, bb, "a 2-D x a batch");
  check_matmul(bb.transpose(-2, -1), random_cpu({20, 9}, 15), "a transposed batch x a 2-D b");
  const Tensor pa = random_cpu({2, 1, 17, 9}, 16), pb = random_cpu({1, 3, 9, 31}, 17);
  check_matmul(pa, pb, "each broadcast along one batch dim (copied)");
  check_matmul(random_cpu({9}, 18), pb, "1-D a against a batch");
  check_matmul(pa, random_cpu({9}, 19), "a batch against a 1-D b");
}

TEST_CASE("cuda batched matmul reads transposed and narrowed views like the cpu", "[cuda][matmul]") {
  // q·kᵀ of attention: k's transpose is a column-major view; and windows of a wider tensor
  // (leading dimensions that are not multiples of 4: the scalar load path).
  const Tensor q = random_cpu({2, 3, 37, 16}, 21), k = random_cpu({2, 3, 41, 16}, 22);
  const Tensor q_gpu = q.to(kGpu), k_gpu = k.to(kGpu);
  check_matmul(q, k.transpose(-2, -1), q_gpu, k_gpu.transpose(-2, -1), "q x k transposed");
  const Tensor at = random_cpu({3, 19, 45}, 23), bt = random_cpu({3, 33, 19}, 24);
  const Tensor at_gpu = at.to(kGpu), bt_gpu = bt.to(kGpu);
  check_matmul(at.transpose(1, 2), bt.transpose(1, 2), at_gpu.transpose(1, 2), bt_gpu.transpose(1, 2),
               "both transposed");
  const Tensor wide = random_cpu({3, 45, 23}, 25);
  const Tensor wide_gpu = wide.to(kGpu);
  check_matmul(wide.narrow(2, 1, 19), bt.transpose(1, 2).narrow(2, 0, 7), wide_gpu.narrow(2, 1, 19),
               bt_gpu.transpose(1, 2).narrow(2, 0, 7), "narrowed windows at odd offsets");
}

TEST_CASE("cuda matmul of a transposed view allocates only its result", "[cuda][matmul]") {
  const Tensor q = random_cpu({2, 3, 40, 64}, 31).to(kGpu), k = random_cpu({2, 3, 40, 64}, 32).to(kGpu);
  const Tensor kt = k.transpose(-2, -1);
  backend_for(kGpu).synchronize();
  const int64_t before = memory_stats(kGpu).allocated_bytes;
  reset_peak_memory_stats(kGpu);
  const Tensor scores = ops::matmul(q, kt);  // [2, 3, 40, 40]
  backend_for(kGpu).synchronize();
  const int64_t result_bytes = scores.numel() * 4, copy_bytes = k.numel() * 4;
  const int64_t grew = memory_stats(kGpu).peak_allocated_bytes - before;
  INFO("peak grew by " << grew << " bytes; the result is " << result_bytes << ", a copy of k " << copy_bytes);
  CHECK(grew >= result_bytes);
  CHECK(grew < result_bytes + copy_bytes / 2);  // size-class rounding is far below a copy of k
}

TEST_CASE("cuda batched matmul gradients match the cpu, with broadcast and transposed operands", "[cuda][matmul]") {
  struct Case {
    Shape a, b;
    bool transpose_b;
  };
  const Case cases[] = {{{3, 17, 33}, {3, 33, 20}, false},
                        {{2, 1, 19, 9}, {3, 9, 35}, false},
                        {{2, 3, 37, 16}, {2, 3, 41, 16}, true},
                        {{33, 20}, {4, 20, 9}, false},
                        {{20}, {2, 20, 9}, false}};
  uint64_t seed = 41;
  for (const Case& c : cases) {
    const Tensor a = random_cpu(c.a, seed++), b = random_cpu(c.b, seed++);
    for (GemmImpl impl : kImpls) {
      GemmImplScope scope(impl);
      const std::string what = shape_text(a, b) + (c.transpose_b ? " (b transposed)" : "") + " impl=" + gemm_impl_name(impl);
      auto run = [&](Device d) {
        Tensor ad = a.clone().to(d), bd = b.clone().to(d);
        ad.requires_grad_(true);
        bd.requires_grad_(true);
        const Tensor y = ops::matmul(ad, c.transpose_b ? bd.transpose(-2, -1) : bd);
        const Tensor dy = random_cpu(y.shape(), 99).to(d);
        y.backward(dy);
        return std::vector<Tensor>{ad.grad(), bd.grad(), dy.to(Device::cpu())};
      };
      const std::vector<Tensor> want = run(Device::cpu());
      const std::vector<Tensor> got = run(kGpu);
      // dA = dY·Bᵀ (summed over broadcast dims): its scale is |dY|·|B|ᵀ, likewise for dB.
      // A 1-D a is the row [1, K], and dY then gains that dim of 1 back.
      const Tensor a2 = a.dim() == 1 ? a.reshape({1, a.shape()[0]}) : a;
      const Tensor dy2 = a.dim() == 1 ? want[2].unsqueeze(-2) : want[2];
      const Tensor bt = c.transpose_b ? b : b.transpose(-2, -1);
      const Tensor scale_a = ops::sum_to(ops::matmul(abs_of(dy2), abs_of(bt)), a2.shape());
      check_product(got[0], want[0], scale_a.reshape(a.shape()), what + " da");
      Tensor scale_b = ops::matmul(abs_of(a2.transpose(-2, -1)), abs_of(dy2));
      if (c.transpose_b) scale_b = scale_b.transpose(-2, -1);
      check_product(got[1], want[1], ops::sum_to(scale_b, b.shape()), what + " db");
    }
  }
}
