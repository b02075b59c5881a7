// linear_gelu (core/ops/linear.cpp) on the CPU must give the bits of gelu(linear(x, w, b)) run as
// two ops, forward and backward, in every dtype and both forms: Activation::GELU's promise
// (core/backend.h), which the CUDA epilogues keep too (tests/cuda/test_cuda_linear_gelu.cpp). The
// CPU backend runs the product, then the GELU's pass over it (Note [GELU after the CPU GEMM, not
// in it] in kernels/cpu/linear.cpp); the shapes still reach each GEMM path, since the
// pre-activation the backward reads comes from them: the direct loop (at most 32³ products), the
// blocked one with edge tiles in both directions and columns split over the threads, K = 0 (the
// epilogue alone), and a 3-D x. Also: nn::Sequential fuses Linear -> GELU, float64 finite
// differences, autocast, and the errors name linear_gelu.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/ops.h"
#include "core/ops/linear.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"
#include "tests/same_bits.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::check_same_bits;
using minidl::testing::error_message;
using minidl::testing::weighted_sum;

namespace {

struct Problem {
  Shape x_shape;
  int64_t out;
};

}  // namespace

TEST_CASE("linear_gelu gives the bits of gelu(linear(...)), forward and backward, every dtype and form",
          "[linear][gelu]") {
  const std::vector<Problem> problems = {
      {{1, 1}, 1},          // direct loop
      {{3, 5}, 7},          // direct loop, odd
      {{37, 70}, 45},       // blocked: edge tiles in M and N, K not a multiple of the vector width
      {{130, 33}, 260},     // blocked: columns split over the threads, a partial last strip
      {{2, 19, 24}, 33},    // 3-D x: rows flattened, shape restored
      {{4, 0}, 6},          // K = 0: the epilogue alone, gelu(bias)
  };
  uint64_t seed = 1;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh})
      for (const Problem& p : problems)
        for (bool with_bias : {true, false}) {
          const int64_t in = p.x_shape[p.x_shape.rank() - 1];
          Generator gen(++seed);
          const TensorOptions opt(dtype, Device::cpu());
          // Values of a few units, so the GELU's curved part and both tails are all used.
          const Tensor x0 = (randn(p.x_shape, TensorOptions(DType::Float32), &gen) * 1.5).to(dtype);
          const Tensor w0 = (randn({p.out, in}, TensorOptions(DType::Float32), &gen) * 0.7).to(dtype);
          const Tensor b0 = with_bias ? (randn({p.out}, TensorOptions(DType::Float32), &gen)).to(dtype) : Tensor();
          // Leaves of each path of their own (clone: no shared storage between the two).
          Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
          Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
          Tensor b = with_bias ? b0.clone().requires_grad_(true) : Tensor();
          Tensor br = with_bias ? b0.clone().requires_grad_(true) : Tensor();
          const std::string what = std::string(dtype_name(dtype)) + " " + gelu_approximate_name(form) + " x " +
                                   p.x_shape.str() + " out " + std::to_string(p.out) + (with_bias ? " bias" : "");

          const Tensor y = ops::linear_gelu(x, w, b, form);
          const Tensor yr = ops::gelu(ops::linear(xr, wr, br), form);
          check_same_bits(y, yr, what + ": forward");
          weighted_sum(y, seed).backward();
          weighted_sum(yr, seed).backward();
          check_same_bits(x.grad(), xr.grad(), what + ": dx");
          check_same_bits(w.grad(), wr.grad(), what + ": dw");
          if (with_bias) check_same_bits(b.grad(), br.grad(), what + ": db");
        }
}

TEST_CASE("linear_gelu: float64 finite differences through the fused GELU", "[linear][gelu]") {
  Generator gen(7);
  const TensorOptions f64(DType::Float64);
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
    check_gradients([form](const std::vector<Tensor>& t) { return weighted_sum(ops::linear_gelu(t[0], t[1], t[2], form), 3); },
                    {randn({5, 6}, f64, &gen), randn({4, 6}, f64, &gen), randn({4}, f64, &gen)});
    check_gradients([form](const std::vector<Tensor>& t) { return weighted_sum(ops::linear_gelu(t[0], t[1], {}, form), 4); },
                    {randn({40, 35}, f64, &gen), randn({36, 35}, f64, &gen)});  // the blocked GEMM
  }
}

TEST_CASE("Sequential runs Linear -> GELU as one fused call with the same bits", "[linear][gelu][nn]") {
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
    Generator gen(11);
    auto fc = std::make_shared<nn::Linear>(24, 40, true, &gen);
    nn::Sequential model({fc, std::make_shared<nn::GELU>(form)});
    const Tensor x = randn({9, 24}, TensorOptions(DType::Float32), &gen);
    const Tensor y = model(x);
    // The GELU ran inside the linear: the last node is the linear's, not a GeluBackward.
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == "LinearBackward");
    const Tensor want = ops::gelu(ops::linear(x, fc->weight, fc->bias), form);  // the two ops, run apart
    check_same_bits(y, want, gelu_approximate_name(form));
  }
}

TEST_CASE("linear_gelu under CPU autocast runs the linear in bfloat16, as gelu(linear) does", "[linear][gelu][autocast]") {
  Generator gen(5);
  const Tensor x = randn({6, 33}, TensorOptions(DType::Float32), &gen);
  const Tensor w = randn({20, 33}, TensorOptions(DType::Float32), &gen);
  const Tensor b = randn({20}, TensorOptions(DType::Float32), &gen);
  Tensor y, want;
  {
    AutocastGuard guard(Device::cpu(), DType::BFloat16);
    y = ops::linear_gelu(x, w, b);
    want = ops::gelu(ops::linear(x, w, b));
  }
  CHECK(y.dtype() == DType::BFloat16);
  check_same_bits(y, want, "autocast bf16");
}

TEST_CASE("linear_gelu's errors name it, the shapes and what was expected", "[linear][gelu][errors]") {
  const Tensor x = zeros({3, 4}), w = zeros({5, 4});
  CHECK(error_message([&] { ops::linear_gelu(x, zeros({5, 3})); }) ==
        "linear_gelu: expected x with last dim 3 (the in_features of weight [5, 3]), got x [3, 4]");
  CHECK(error_message([&] { ops::linear_gelu(x, w, zeros({4})); }) ==
        "linear_gelu: bias has shape [4], expected [5] for weight [5, 4]");
  CHECK(error_message([&] { ops::linear_gelu(x, w, {}, static_cast<GeluApproximate>(7)); }) ==
        "linear_gelu: approximate must be GeluApproximate::None or GeluApproximate::Tanh, got 7");
  CHECK(error_message([&] { ops::linear_gelu(x.to(DType::Float64), w); }) ==
        "linear_gelu: x is float64 but weight is float32");
}
