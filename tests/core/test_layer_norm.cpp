// layer_norm (core/ops/layer_norm): the output against PyTorch's formula computed here in long
// double (biased variance, eps inside the square root), exact values of small rows, the
// defaults, the shapes PyTorch accepts (any leading dims, D = 1, no rows), the parameter
// gradients against sums computed here, and the errors for bad arguments. Finite differences:
// tests/core/test_gradcheck_ops.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/ops/layer_norm.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;
using minidl::testing::rand64;

namespace {

// PyTorch's layer_norm of x [rows, D] (row-major values), in long double.
std::vector<long double> layer_norm_reference(const std::vector<double>& x, int64_t rows, int64_t D,
                                              const std::vector<double>& w, const std::vector<double>& b, double eps) {
  std::vector<long double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    long double mean = 0, var = 0;
    for (int64_t j = 0; j < D; ++j) mean += x[static_cast<size_t>(r * D + j)];
    mean /= D;
    for (int64_t j = 0; j < D; ++j) var += std::pow(x[static_cast<size_t>(r * D + j)] - mean, 2);
    var /= D;  // biased
    for (int64_t j = 0; j < D; ++j) {
      const size_t i = static_cast<size_t>(r * D + j);
      const long double wj = w.empty() ? 1.0L : w[static_cast<size_t>(j)];
      const long double bj = b.empty() ? 0.0L : b[static_cast<size_t>(j)];
      y[i] = (x[i] - mean) / std::sqrt(var + eps) * wj + bj;
    }
  }
  return y;
}

}  // namespace

TEST_CASE("layer_norm normalises each row by its mean and biased variance with eps inside the square root",
          "[core][layer_norm]") {
  Generator g(11);
  const int64_t D = 7;
  Tensor x = rand64({3, 5, D}, g, -2.0, 3.0), w = rand64({D}, g), b = rand64({D}, g);
  const double eps = 1e-3;  // large enough that placing it elsewhere changes the 4th digit
  const std::vector<double> y = ops::layer_norm(x, w, b, eps).to_vector<double>();
  const std::vector<long double> want =
      layer_norm_reference(x.to_vector<double>(), 15, D, w.to_vector<double>(), b.to_vector<double>(), eps);
  REQUIRE(y.size() == want.size());
  // float64, a dozen operations on values of size ~1 accumulated in double: equal to 1e-14.
  for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - static_cast<double>(want[i])) <= 1e-14);
}

TEST_CASE("layer_norm of small rows gives the exact values of the biased-variance formula", "[core][layer_norm]") {
  // Row [1, 3]: mean 2, biased variance 1 (the unbiased one would be 2).
  const Tensor x = from_vector(std::vector<double>{1, 3}, {1, 2}, DType::Float64);
  CHECK(ops::layer_norm(x, {}, {}, 0.0).to_vector<double>() == std::vector<double>{-1.0, 1.0});
  // eps inside the root: 1/sqrt(1 + 3) = 0.5 exactly.
  CHECK(ops::layer_norm(x, {}, {}, 3.0).to_vector<double>() == std::vector<double>{-0.5, 0.5});
  // weight scales and bias shifts after normalising: [-1, 1]·[2, -4] + [10, 20].
  const Tensor w = from_vector(std::vector<double>{2, -4}, {2}, DType::Float64);
  const Tensor b = from_vector(std::vector<double>{10, 20}, {2}, DType::Float64);
  CHECK(ops::layer_norm(x, w, b, 0.0).to_vector<double>() == std::vector<double>{8.0, 16.0});
  // float32 the same (every step exact).
  CHECK(ops::layer_norm(x.to(DType::Float32), w.to(DType::Float32), b.to(DType::Float32), 0.0).to_vector<float>() ==
        std::vector<float>{8.0f, 16.0f});
}

TEST_CASE("layer_norm defaults to eps 1e-5 and no affine parameters, and keeps any leading shape",
          "[core][layer_norm]") {
  Generator g(12);
  const Tensor x = rand64({2, 3, 4, 5}, g);
  const Tensor y = ops::layer_norm(x);
  CHECK(y.shape() == x.shape());
  const std::vector<double> got = y.to_vector<double>();
  const std::vector<long double> want = layer_norm_reference(x.to_vector<double>(), 24, 5, {}, {}, 1e-5);
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - static_cast<double>(want[i])) <= 1e-13);
  // rank 1: one row.
  const Tensor v = rand64({6}, g);
  CHECK(ops::layer_norm(v).shape() == Shape{6});
  const std::vector<long double> want_v = layer_norm_reference(v.to_vector<double>(), 1, 6, {}, {}, 1e-5);
  const std::vector<double> got_v = ops::layer_norm(v).to_vector<double>();
  for (size_t i = 0; i < got_v.size(); ++i) CHECK(std::abs(got_v[i] - static_cast<double>(want_v[i])) <= 1e-13);
}

TEST_CASE("layer_norm in float32 is float32's rounding of the exact result", "[core][layer_norm]") {
  Generator g(13);
  const int64_t rows = 9, D = 33;
  const Tensor x64 = rand64({rows, D}, g, -3.0, 5.0), w64 = rand64({D}, g), b64 = rand64({D}, g);
  const std::vector<float> y =
      ops::layer_norm(x64.to(DType::Float32), w64.to(DType::Float32), b64.to(DType::Float32)).to_vector<float>();
  // The reference takes the float32-rounded inputs: the kernel sees those.
  const std::vector<long double> want =
      layer_norm_reference(x64.to(DType::Float32).to(DType::Float64).to_vector<double>(), rows, D,
                           w64.to(DType::Float32).to(DType::Float64).to_vector<double>(),
                           b64.to(DType::Float32).to(DType::Float64).to_vector<double>(), 1e-5);
  // The CPU computes in double and rounds once: half an ulp of y, plus double's error in the
  // terms x̂·w and b (~1e-15 of their size): 2^-24 of |x̂·w| + |b| covers both with room.
  const std::vector<double> bv = b64.to(DType::Float32).to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) {
    const size_t j = i % static_cast<size_t>(D);
    const long double xhat_w = want[i] - bv[j];
    const double tol =
        std::ldexp(1.0, -24) * static_cast<double>(std::abs(xhat_w) + std::abs(bv[j]) + std::abs(want[i]));
    CHECK(std::abs(y[i] - static_cast<double>(want[i])) <= tol);
  }
}

TEST_CASE("layer_norm over D = 1 gives the bias, and over no rows gives zero parameter gradients",
          "[core][layer_norm]") {
  Generator g(14);
  // D = 1: x − mean is 0 for every row, so y = bias (PyTorch: 0·rstd·w + b).
  const Tensor x1 = rand64({4, 1}, g).requires_grad_(), w1 = rand64({1}, g).requires_grad_();
  const Tensor b1 = rand64({1}, g).requires_grad_();
  const Tensor y1 = ops::layer_norm(x1, w1, b1);
  const double bias = b1.item();
  CHECK(y1.to_vector<double>() == std::vector<double>(4, bias));
  y1.sum().backward();
  CHECK(x1.grad().to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(w1.grad().to_vector<double>() == std::vector<double>{0.0});
  CHECK(b1.grad().to_vector<double>() == std::vector<double>{4.0});
  // No rows: an empty output, and dw = db = 0 (a sum over nothing), as in PyTorch.
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const Tensor x0 = zeros({0, 3}, dtype).requires_grad_();
    const Tensor w0 = ones({3}, dtype).requires_grad_(), b0 = zeros({3}, dtype).requires_grad_();
    const Tensor y0 = ops::layer_norm(x0, w0, b0);
    CHECK(y0.shape() == Shape{0, 3});
    y0.sum().backward();
    CHECK(x0.grad().shape() == Shape{0, 3});
    CHECK(w0.grad().to(DType::Float64).to_vector<double>() == std::vector<double>(3, 0.0));
    CHECK(b0.grad().to(DType::Float64).to_vector<double>() == std::vector<double>(3, 0.0));
  }
}

TEST_CASE("layer_norm parameter gradients are the column sums of dy·x̂ and dy", "[core][layer_norm]") {
  Generator g(15);
  const int64_t rows = 6, D = 5;
  const Tensor x = rand64({rows, D}, g), dy = rand64({rows, D}, g);
  const Tensor w = rand64({D}, g).requires_grad_(), b = rand64({D}, g).requires_grad_();
  ops::layer_norm(x, w, b).backward(dy);
  const std::vector<long double> xhat = layer_norm_reference(x.to_vector<double>(), rows, D, {}, {}, 1e-5);
  const std::vector<double> dyv = dy.to_vector<double>();
  const std::vector<double> dw = w.grad().to_vector<double>(), db = b.grad().to_vector<double>();
  for (int64_t j = 0; j < D; ++j) {
    long double sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      sw += dyv[static_cast<size_t>(r * D + j)] * xhat[static_cast<size_t>(r * D + j)];
      sb += dyv[static_cast<size_t>(r * D + j)];
    }
    // float64 sums of 6 terms of size ~1: 1e-14.
    CHECK(std::abs(dw[static_cast<size_t>(j)] - static_cast<double>(sw)) <= 1e-14);
    CHECK(std::abs(db[static_cast<size_t>(j)] - static_cast<double>(sb)) <= 1e-14);
  }
}

TEST_CASE("layer_norm rejects bad arguments with errors that name the shapes and dtypes",
          "[core][layer_norm][errors]") {
  const Tensor x = zeros({4, 5}, DType::Float64);
  std::string m = error_message([&] { ops::layer_norm(zeros({4, 5}, DType::Int64)); });
  CHECK_THAT(m, Catch::Contains("layer_norm") && Catch::Contains("int64") && Catch::Contains("[4, 5]"));
  m = error_message([&] { ops::layer_norm(scalar_tensor(1.0, DType::Float64)); });
  CHECK_THAT(m, Catch::Contains("layer_norm") && Catch::Contains("rank >= 1"));
  m = error_message([&] { ops::layer_norm(x, zeros({4}, DType::Float64)); });
  CHECK_THAT(m, Catch::Contains("weight has shape [4]") && Catch::Contains("expected [5]") &&
                    Catch::Contains("[4, 5]"));
  m = error_message([&] { ops::layer_norm(x, {}, zeros({1, 5}, DType::Float64)); });
  CHECK_THAT(m, Catch::Contains("bias has shape [1, 5]") && Catch::Contains("expected [5]"));
  m = error_message([&] { ops::layer_norm(x, zeros({5}, DType::Float32)); });
  CHECK_THAT(m, Catch::Contains("weight is float32 but x is float64"));
  m = error_message([&] { ops::layer_norm(x, {}, {}, -1e-5); });
  CHECK_THAT(m, Catch::Contains("eps >= 0") && Catch::Contains("-1e-05"));
  m = error_message([&] { ops::layer_norm(Tensor()); });
  CHECK_THAT(m, Catch::Contains("layer_norm"));
}

TEST_CASE("layer_norm with only a weight or only a bias equals the affine form with the other neutral",
          "[core][layer_norm]") {
  // The kernels choose their loop by which of weight and bias are present; a mixed-up choice
  // shows only when exactly one of them is. An absent weight is 1 and an absent bias 0, exactly.
  Generator g(41);
  const Tensor x = randn({5, 37}, DType::Float32, &g), w = randn({37}, DType::Float32, &g),
               b = randn({37}, DType::Float32, &g), dy = randn({5, 37}, DType::Float32, &g);
  for (bool with_weight : {true, false}) {
    INFO("with weight " << with_weight);
    const Tensor xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
    const Tensor ya = with_weight ? ops::layer_norm(xa, w, Tensor()) : ops::layer_norm(xa, Tensor(), b);
    const Tensor yb = with_weight ? ops::layer_norm(xb, w, zeros({37}, DType::Float32))
                                  : ops::layer_norm(xb, ones({37}, DType::Float32), b);
    CHECK(ya.to_vector<float>() == yb.to_vector<float>());
    ya.backward(dy);
    yb.backward(dy);
    CHECK(xa.grad().to_vector<float>() == xb.grad().to_vector<float>());
  }
}
