// The tensor-core attention forward (kernels/cuda/attention/flash_mma.cu) through
// ops::scaled_dot_product_attention on bfloat16 and float16 q, k, v, against the CPU in float64
// from the same 16-bit values: out, and dq, dk, dv (the backward runs the float32 kernels on the
// lse the tensor-core forward saved). Query and key counts that cut the 64-row and 64-key tiles
// unevenly, L < S and L > S, every head size it takes (16, 32, 64, 128), causal and not, head
// views of a fused projection (row strides of 3·D: cp.async), offset views (the element path),
// dropout with the float32 kernel's mask, and the same bits on a second run. Head sizes it does
// not take (E != Ev, or 24) still run, staged through float32.
//
// Tolerances, with their reasons (u16 = 2^-8 for bfloat16, 2^-11 for float16):
//   out: P is rounded to 16 bits before P·V, as FlashAttention does: at most u16·Σ_j p_j|v_j|/l
//        <= u16·max|v|; the output's own rounding adds u16·|out|; float32 sums and __expf are far
//        below. So |got - want| <= 2·u16·max|v| + 2·u16·|want|.
//   dq, dk, dv: the backward reads the 16-bit out (D_i = dout_i·out_i carries its rounding) and
//        rounds each gradient once: 8·u16 of the largest |gradient| covers both, while a wrong
//        mask element or a lost key tile moves a gradient by O(0.1) of it.
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/attention.h"

using namespace minidl;
using namespace minidl::cuda_test;

namespace {

constexpr DType kHalves[] = {DType::BFloat16, DType::Float16};

double u16_of(DType half) { return half == DType::BFloat16 ? 0x1p-8 : 0x1p-11; }

double max_abs(const Tensor& t) {
  double m = 0;
  for (float x : t.to(Device::cpu()).to(DType::Float32).to_vector<float>()) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// q, k, v (16-bit, as given: views allowed) on the device against float64 on the CPU.
void check_flash(const Tensor& q16, const Tensor& k16, const Tensor& v16, bool causal, double p, uint64_t seed,
                 const std::string& what) {
  const DType half = q16.dtype();
  INFO(what << " " << half << " causal " << causal << " p " << p);
  const double u16 = u16_of(half);
  const Shape out_shape{q16.shape()[0], q16.shape()[1], q16.shape()[2], v16.shape()[3]};
  const Tensor dout = random_cpu(out_shape, seed).to(half);
  Tensor q64 = q16.to(Device::cpu()).to(DType::Float64).detach().requires_grad_();
  Tensor k64 = k16.to(Device::cpu()).to(DType::Float64).detach().requires_grad_();
  Tensor v64 = v16.to(Device::cpu()).to(DType::Float64).detach().requires_grad_();
  Tensor qg = q16.detach().requires_grad_(), kg = k16.detach().requires_grad_(), vg = v16.detach().requires_grad_();
  Generator g_cpu(seed), g_gpu(seed);  // the same state: the same mask
  const Tensor want = ops::scaled_dot_product_attention(q64, k64, v64, causal, p, &g_cpu);
  const Tensor got = ops::scaled_dot_product_attention(qg, kg, vg, causal, p, &g_gpu);
  REQUIRE(got.dtype() == half);
  want.backward(dout.to(DType::Float64));
  got.backward(dout.to(kGpu));
  const double vmax = max_abs(v64) * (p > 0 ? 1.0 / (1.0 - p) : 1.0);
  check_close(got.to(DType::Float32), want, 2 * u16 * vmax, 2 * u16, "out");
  check_close(qg.grad().to(DType::Float32), q64.grad(), 8 * u16 * max_abs(q64.grad()), 0, "dq");
  check_close(kg.grad().to(DType::Float32), k64.grad(), 8 * u16 * max_abs(k64.grad()), 0, "dk");
  check_close(vg.grad().to(DType::Float32), v64.grad(), 8 * u16 * max_abs(v64.grad()), 0, "dv");
}

void check_shape(DType half, int64_t B, int64_t H, int64_t L, int64_t S, int64_t D, bool causal, uint64_t seed,
                 double p = 0) {
  const Tensor q = random_cpu({B, H, L, D}, seed, -2, 2).to(half).to(kGpu);
  const Tensor k = random_cpu({B, H, S, D}, seed + 1, -2, 2).to(half).to(kGpu);
  const Tensor v = random_cpu({B, H, S, D}, seed + 2).to(half).to(kGpu);
  check_flash(q, k, v, causal, p, seed + 3,
              "B " + std::to_string(B) + " H " + std::to_string(H) + " L " + std::to_string(L) + " S " +
                  std::to_string(S) + " D " + std::to_string(D));
}

}  // namespace

TEST_CASE("tensor-core attention forward matches the CPU on odd shapes and every head size, with its backward",
          "[cuda][attention][half][mma]") {
  uint64_t seed = 7000;
  for (DType half : kHalves)
    for (bool causal : {false, true}) {
      check_shape(half, 2, 3, 70, 70, 64, causal, seed += 10);   // a full and a partial tile of rows and keys
      check_shape(half, 1, 2, 5, 130, 32, causal, seed += 10);   // L < S: three key tiles, one short
      check_shape(half, 1, 1, 129, 40, 16, causal, seed += 10);  // L > S
      check_shape(half, 1, 1, 33, 65, 128, causal, seed += 10);  // head size 128
    }
}

TEST_CASE("tensor-core attention forward: head views of a fused projection, offset views, dropout, same bits",
          "[cuda][attention][half][mma]") {
  for (DType half : kHalves) {
    // The GPT's path: q, k, v as [B, H, T, D] views of one [B, T, 3·H·D] projection (row stride 3·H·D).
    const int64_t B = 2, T = 45, H = 2, D = 32, C = H * D;
    const Tensor qkv = random_cpu({B, T, 3 * C}, 7100, -2, 2).to(half).to(kGpu);
    std::vector<Tensor> heads;
    for (const Tensor& t : qkv.split(C, 2)) heads.push_back(t.reshape(Shape{B, T, H, D}).transpose(1, 2));
    check_flash(heads[0], heads[1], heads[2], true, 0, 7101, "fused projection");
    // Views one element into their storage: rows 2 bytes off 16, the element path.
    auto offset_view = [&](const Shape& s, uint64_t seed) {
      const Tensor flat = random_cpu({s.numel() + 1}, seed, -2, 2).to(half).to(kGpu);
      return flat.narrow(0, 1, s.numel()).view(s);
    };
    check_flash(offset_view({1, 2, 37, 64}, 7110), offset_view({1, 2, 50, 64}, 7111), offset_view({1, 2, 50, 64}, 7112),
                false, 0, 7113, "offset views");
    // Dropout: the float32 kernel's mask (the CPU's too).
    check_shape(half, 1, 2, 35, 41, 16, false, 7120, 0.3);
    check_shape(half, 2, 1, 66, 66, 32, true, 7130, 0.5);
    // Head sizes it does not take run staged through float32.
    check_shape(half, 1, 1, 20, 20, 24, true, 7140);
    // The same bits on a second run.
    const Tensor q = random_cpu({2, 2, 67, 64}, 7150).to(half).to(kGpu), k = random_cpu({2, 2, 67, 64}, 7151).to(half).to(kGpu);
    const Tensor v = random_cpu({2, 2, 67, 64}, 7152).to(half).to(kGpu);
    const Tensor a = ops::scaled_dot_product_attention(q, k, v, true).to(DType::Float32);
    const Tensor b = ops::scaled_dot_product_attention(q, k, v, true).to(DType::Float32);
    check_equal(a, b, "second run");
  }
}
