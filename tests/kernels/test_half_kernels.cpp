// The CPU's 16-bit kernels. A bfloat16 or float16 op computes in float32 and rounds each output
// once (kernels/half_staging.h, the GEMM's convert-while-packing), so its result must be,
// bit for bit, the float32 op on the same values rounded to the 16-bit format: the inputs here
// are drawn in float32 and rounded first, so both runs see identical values. That exact check
// covers every op the GPT, the MLP and the CNN use, forward and backward (where backward is one
// kernel and reads only the inputs). A backward that reads a 16-bit value the forward stored
// (softmax's and attention's outputs, the fused cross-entropy's gradient, a rounded total
// norm) cannot match bit for bit, since float32 kept that value unrounded; those gradients are
// held to a tolerance instead (check_near below). bfloat16 products on a CPU with AVX512_BF16
// run their own micro-kernel, which sums the same exact products in float32 but in pairs, so
// they are held to the float32 accumulation bound instead (check_product_op). On top, the GEMM is
// held against float64 arithmetic with the tolerance its error analysis gives (below), which
// would catch a 16-bit accumulator that the exact check, sharing the float32 GEMM's code, could
// not see.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/clip_grad.h"
#include "nn/functional.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace minidl;

namespace {

constexpr DType kHalves[] = {DType::BFloat16, DType::Float16};

// A float32 tensor of standard normal values that `half` represents exactly.
Tensor representable(const Shape& shape, DType half, Generator& g, double scale = 1.0) {
  return (randn(shape, DType::Float32, &g) * scale).to(half).to(DType::Float32);
}

// The 16-bit encodings of a 16-bit tensor, for bitwise comparison.
std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.detach().contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  const auto* p = static_cast<const uint16_t*>(c.raw_data());
  out.assign(p, p + c.numel());
  return out;
}

void check_rounded(const Tensor& half_result, const Tensor& float_result, const char* what) {
  INFO(what << ": " << half_result.dtype() << " " << half_result.shape());
  REQUIRE(half_result.shape() == float_result.shape());
  if (half_result.dtype() == DType::Float32) {  // an output the op keeps in float32 (statistics)
    CHECK(half_result.to_vector<float>() == float_result.to_vector<float>());
    return;
  }
  const std::vector<uint16_t> got = bits_of(half_result), want = bits_of(float_result.to(half_result.dtype()));
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
  CHECK(mismatches == 0);
}

enum class Grads { None, Exact, Near };

// A gradient that went through one stored 16-bit value: each such value carries a relative
// error of at most u16 (2^-8 bfloat16, 2^-11 float16), which the backward formulas (a product
// and a row sum: softmax, log-softmax, cross-entropy; a product: dropout) carry into the result
// at most a few times over, plus the final rounding. 8·u16 of the gradient's largest magnitude
// bounds that with room; a wrong kernel (a 16-bit accumulator, a lost term) is far outside it.
void check_near(const Tensor& half_result, const Tensor& float_result, const char* what) {
  INFO(what << ": " << half_result.dtype() << " " << half_result.shape());
  const double u16 = half_result.dtype() == DType::BFloat16 ? 0x1p-8 : 0x1p-11;
  const std::vector<float> got = half_result.to(DType::Float32).to_vector<float>(), want = float_result.to_vector<float>();
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " against " << want[i]);
    REQUIRE(std::fabs(static_cast<double>(got[i]) - want[i]) <= 8 * u16 * scale);
  }
}

// Runs op on 16-bit copies and on float32 copies of `inputs` (float32 tensors whose values the
// format holds), checks the 16-bit output is the float32 output rounded, then (when grads) runs
// backward from the same upstream gradient and checks each input's gradient likewise.
void check_op(DType half, const std::vector<Tensor>& inputs, const std::function<Tensor(const std::vector<Tensor>&)>& op,
              Grads grads, Generator& g) {
  std::vector<Tensor> in16, in32;
  for (const Tensor& t : inputs) {
    const bool floating = is_floating(t.dtype());
    in16.push_back(floating ? t.to(half).detach().requires_grad_(grads != Grads::None) : t);
    in32.push_back(floating ? t.clone().detach().requires_grad_(grads != Grads::None) : t);
  }
  const Tensor y16 = op(in16), y32 = op(in32);
  CHECK(y16.dtype() == half);
  check_rounded(y16, y32, "output");
  if (grads == Grads::None) return;
  const Tensor seed = representable(y32.shape(), half, g);
  y16.backward(seed.to(half));
  y32.backward(seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!is_floating(inputs[i].dtype())) continue;
    INFO("gradient of input " << i);
    REQUIRE(in16[i].grad().defined());
    CHECK(in16[i].grad().dtype() == half);
    if (grads == Grads::Exact) check_rounded(in16[i].grad(), in32[i].grad(), "gradient");
    else check_near(in16[i].grad(), in32[i].grad(), "gradient");
  }
}

// |t| elementwise, as a float32 tensor of t's shape.
Tensor absolute(const Tensor& t) {
  std::vector<float> v = t.detach().contiguous().to_vector<float>();
  for (float& x : v) x = std::fabs(x);
  return from_vector(v, t.shape());
}

// A product op (matmul, linear) in 16 bits against float32, for the GEMM kernels whose sums are
// float32 but not in the float32 GEMM's order: bfloat16 on a CPU with AVX512_BF16 runs the
// dot-product micro-kernel (kernels/cpu/gemm.cpp), which adds the exact products in pairs. Each
// float32 sum of K exact products is within K·u32·Σ|a·b| of the exact sum (u32 = 2^-24), and the
// 16-bit result adds one rounding (u16·|C|), so
//   |C16 - C32| <= u16·|C32| + 3·K·u32·Σ|a·b|
// (2·K·u32 for the two sums, with room for the rounding of the magnitude itself); Σ|a·b| is the
// same op on |inputs|. Gradients are products too, of a rounded upstream gradient: check_near.
// float16 (and bfloat16 elsewhere) packs into the float32 GEMM and is held bit for bit instead.
void check_product_op(DType half, const std::vector<Tensor>& inputs,
                      const std::function<Tensor(const std::vector<Tensor>&)>& op, int64_t k, Generator& g) {
  if (half != DType::BFloat16) return check_op(half, inputs, op, Grads::Exact, g);
  std::vector<Tensor> in16, in32, in_abs;
  for (const Tensor& t : inputs) {
    in16.push_back(t.to(half).detach().requires_grad_(true));
    in32.push_back(t.clone().detach().requires_grad_(true));
    in_abs.push_back(absolute(t));
  }
  const Tensor y16 = op(in16), y32 = op(in32);
  CHECK(y16.dtype() == half);
  const std::vector<float> got = y16.to(DType::Float32).to_vector<float>(), want = y32.to_vector<float>();
  const std::vector<float> magnitude = op(in_abs).to_vector<float>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 0x1p-8 * std::fabs(want[i]) + 3.0 * static_cast<double>(k) * 0x1p-24 * magnitude[i];
    INFO("element " << i << ": " << got[i] << " against " << want[i] << ", bound " << bound);
    REQUIRE(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound);
  }
  const Tensor seed = representable(y32.shape(), half, g);
  y16.backward(seed.to(half));
  y32.backward(seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(in16[i].grad().defined());
    CHECK(in16[i].grad().dtype() == half);
    check_near(in16[i].grad(), in32[i].grad(), "gradient");
  }
}

}  // namespace

TEST_CASE("16-bit matmul, batched matmul and linear: float32 products, rounded once", "[half][kernels]") {
  Generator g(11);
  for (DType half : kHalves) {
    INFO(half);
    // Odd sizes on both sides of the small-problem path and of the packing blocks.
    check_product_op(half, {representable({7, 5}, half, g), representable({5, 3}, half, g)},
             [](const auto& t) { return ops::matmul(t[0], t[1]); }, 5, g);
    check_product_op(half, {representable({67, 300}, half, g), representable({300, 45}, half, g)},
             [](const auto& t) { return ops::matmul(t[0], t[1]); }, 300, g);
    check_product_op(half, {representable({3, 2, 17, 33}, half, g), representable({3, 2, 19, 33}, half, g)},
             [](const auto& t) { return ops::matmul(t[0], t[1].transpose(-2, -1)); }, 33, g);
    check_product_op(half, {representable({2, 65, 48}, half, g), representable({48, 37}, half, g), representable({37}, half, g)},
             [](const auto& t) { return ops::linear(t[0], t[1].t(), t[2]); }, 48, g);
    check_product_op(half, {representable({40, 70}, half, g), representable({31, 70}, half, g), representable({31}, half, g)},
             [](const auto& t) { return ops::linear(t[0], t[1], t[2], /*relu=*/true); }, 70, g);
    // 2561 x 100 with K = 301 (odd, past one K block): 2560 rows fit a panel, so C takes two
    // panels of 1281 and 1280 rows, not 2560 and 1: a panel of one row would run the small-problem
    // loop, which sums K in another order than the float32 product of the whole C.
    check_product_op(half, {representable({2561, 301}, half, g), representable({301, 100}, half, g)},
             [](const auto& t) { return ops::matmul(t[0], t[1]); }, 301, g);
    // C of 1100 columns: the float32 buffer holds 192 rows at a time (kernels/cpu/linear.cpp), so
    // 450 rows go in three panels of 150; each must land on its own rows.
    check_product_op(half, {representable({450, 9}, half, g), representable({9, 1100}, half, g)},
             [](const auto& t) { return ops::matmul(t[0], t[1]); }, 9, g);
    check_product_op(half, {representable({450, 9}, half, g), representable({1100, 9}, half, g), representable({1100}, half, g)},
             [](const auto& t) { return ops::linear(t[0], t[1], t[2], /*relu=*/true); }, 9, g);
  }
}

TEST_CASE("16-bit GEMM against float64 arithmetic, within what float32 accumulation and one rounding allow",
          "[half][kernels]") {
  Generator g(12);
  // |C16 - C| <= u16·|C| + K·u32·Σ_k |a_ik·b_kj|: the final rounding to the 16-bit format
  // (unit roundoff u16 = 2^-8 for bfloat16, 2^-11 for float16) plus float32 accumulation over K
  // terms (the standard bound K·u32 with u32 = 2^-24, times the sum of magnitudes). The inputs
  // are exact in both formats, so no input rounding enters.
  const int64_t M = 33, K = 515, N = 29;
  for (DType half : kHalves) {
    INFO(half);
    const double u16 = half == DType::BFloat16 ? 0x1p-8 : 0x1p-11;
    const Tensor a = representable({M, K}, half, g), b = representable({K, N}, half, g);
    const std::vector<float> c = ops::matmul(a.to(half), b.to(half)).to(DType::Float32).to_vector<float>();
    const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) {
          exact += static_cast<double>(av[i * K + k]) * bv[k * N + j];
          magnitude += std::fabs(static_cast<double>(av[i * K + k]) * bv[k * N + j]);
        }
        const double bound = u16 * std::fabs(exact) + K * 0x1p-24 * magnitude;
        INFO("C[" << i << ", " << j << "] = " << c[i * N + j] << ", exact " << exact);
        REQUIRE(std::fabs(c[i * N + j] - exact) <= bound);
      }
  }
}

TEST_CASE("16-bit transformer ops are the float32 ops rounded once, forward and backward", "[half][kernels]") {
  Generator g(13);
  for (DType half : kHalves) {
    INFO(half);
    // Attention with the causal mask, q/k/v as strided views of one projection (the GPT's path).
    check_op(half, {representable({2, 9, 3 * 32}, half, g)},
             [](const auto& t) {
               const std::vector<Tensor> qkv = t[0].split(32, 2);
               auto heads = [](const Tensor& x) { return x.reshape({2, 9, 2, 16}).transpose(1, 2); };
               return ops::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);
             },
             Grads::Near, g);  // backward reads the stored 16-bit output (D_i = Σ dout·out)
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh})
      check_op(half, {representable({13, 37}, half, g, 3.0)}, [form](const auto& t) { return ops::gelu(t[0], form); },
               Grads::Exact, g);
    check_op(half, {representable({6, 50}, half, g), representable({50}, half, g), representable({50}, half, g)},
             [](const auto& t) { return ops::layer_norm(t[0], t[1], t[2]); }, Grads::Exact, g);
    check_op(half, {from_vector<int64_t>({3, 0, 3, 7}), representable({8, 24}, half, g)},
             [](const auto& t) { return ops::embedding(t[0], t[1]); }, Grads::Exact, g);
    check_op(half, {representable({5, 11}, half, g, 4.0)}, [](const auto& t) { return ops::softmax(t[0], 1); }, Grads::Near, g);
    check_op(half, {representable({5, 11}, half, g, 4.0)}, [](const auto& t) { return ops::log_softmax(t[0], 1); },
             Grads::Near, g);
    check_op(half, {representable({4, 9, 3}, half, g)}, [](const auto& t) { return ops::sum(t[0], 1); }, Grads::Exact, g);
    check_op(half, {representable({4, 9}, half, g)}, [](const auto& t) { return ops::tril(t[0]); }, Grads::None, g);
    // Dropout: the same counters give the same mask in both dtypes, and at p = 0.5 the mask's
    // scale 2 is exact in both (at other p the 16-bit mask holds 1/(1-p) rounded, as PyTorch's does).
    check_op(half, {representable({8, 40}, half, g)},
             [](const auto& t) {
               Generator drop(5);
               return ops::dropout(t[0], 0.5, true, &drop);
             },
             Grads::Exact, g);
  }
}

TEST_CASE("16-bit cross-entropy, elementwise and CNN ops are the float32 ops rounded once", "[half][kernels]") {
  Generator g(14);
  for (DType half : kHalves) {
    INFO(half);
    check_op(half, {representable({6, 10}, half, g, 3.0), from_vector<int64_t>({1, 0, 9, 3, 3, 5})},
             [](const auto& t) { return nn::functional::cross_entropy(t[0], t[1], ops::Reduction::None); }, Grads::Near, g);
    check_op(half, {representable({6, 10}, half, g), representable({10}, half, g)},
             [](const auto& t) { return t[0] * t[1]; }, Grads::Near, g);  // b's gradient sums rounded products
    check_op(half, {representable({6, 10}, half, g), representable({10}, half, g)},
             [](const auto& t) { return t[0] + t[1]; }, Grads::Exact, g);
    check_op(half, {representable({6, 10}, half, g)}, [](const auto& t) { return t[0] / 3.0; }, Grads::None, g);
    check_op(half, {representable({6, 10}, half, g)}, [](const auto& t) { return nn::functional::relu(t[0]); },
             Grads::Exact, g);
    check_op(half, {representable({2, 3, 9, 8}, half, g), representable({4, 3, 3, 3}, half, g), representable({4}, half, g)},
             [](const auto& t) { return ops::conv2d(t[0], t[1], t[2], {1, 1}, {1, 1}); }, Grads::Exact, g);
    check_op(half, {representable({2, 3, 9, 8}, half, g)}, [](const auto& t) { return ops::max_pool2d(t[0], {2, 2}); },
             Grads::Exact, g);
    check_op(half, {representable({2, 3, 9, 8}, half, g)}, [](const auto& t) { return ops::avg_pool2d(t[0], {3, 3}); },
             Grads::Exact, g);
    check_op(half, {representable({4, 3, 5, 5}, half, g), representable({3}, half, g), representable({3}, half, g)},
             [](const auto& t) {
               return ops::batch_norm(t[0], Tensor(), Tensor(), t[1], t[2], /*training=*/true, 0.1, 1e-5);
             },
             Grads::Exact, g);
  }
}

TEST_CASE("SGD, Adam and gradient clipping update 16-bit tensors in float32 and round once", "[half][kernels]") {
  Generator g(15);
  for (DType half : kHalves) {
    INFO(half);
    const Tensor w = representable({37}, half, g), grad = representable({37}, half, g);
    // One step from the same values and gradient: the 16-bit parameter ends as the float32 one rounded.
    auto pair = [&] {
      Tensor p16 = w.to(half).requires_grad_(), p32 = w.clone().requires_grad_();
      p16.set_grad(grad.to(half));
      p32.set_grad(grad.clone());
      return std::make_pair(p16, p32);
    };
    {
      auto [p16, p32] = pair();
      optim::Adam adam16({p16}, {.lr = 0.01}), adam32({p32}, {.lr = 0.01});
      adam16.step();
      adam32.step();
      check_rounded(p16, p32, "Adam");
    }
    {
      auto [p16, p32] = pair();
      optim::SGD sgd16({p16}, {.lr = 0.1, .momentum = 0.9}), sgd32({p32}, {.lr = 0.1, .momentum = 0.9});
      sgd16.step();
      sgd32.step();
      check_rounded(p16, p32, "SGD");
    }
    {
      auto [p16, p32] = pair();
      const Tensor n16 = nn::clip_grad_norm_({p16}, 0.5), n32 = nn::clip_grad_norm_({p32}, 0.5);
      CHECK(n16.dtype() == half);
      check_rounded(n16, n32, "total norm");
      check_near(p16.grad(), p32.grad(), "clipped gradient");  // scaled by the rounded norm
    }
  }
}
