// batch_norm (core/ops/batch_norm): the output and the running statistics against PyTorch's
// formulas computed here by hand, evaluation with the running statistics, finite
// differences in float64 (training and evaluation), and the errors for bad arguments.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/ops/batch_norm.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::error_message;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

TEST_CASE("batch_norm in training normalises by batch statistics and updates running stats as PyTorch does",
          "[core][batch_norm]") {
  const int64_t N = 3, C = 2, H = 2, W = 3, M = N * H * W;
  Generator g(1);
  Tensor x = rand64({N, C, H, W}, g, -2.0, 3.0), gamma = rand64({C}, g), beta = rand64({C}, g);
  Tensor rm = rand64({C}, g), rv = rand64({C}, g, 0.5, 2.0);
  const auto rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>(), xv = x.to_vector<double>();
  const double momentum = 0.3, eps = 1e-3;
  const Tensor y = ops::batch_norm(x, rm, rv, gamma, beta, true, momentum, eps);
  const auto yv = y.to_vector<double>();
  for (int64_t c = 0; c < C; ++c) {
    // PyTorch: mean and biased var over (N, H, W) normalise; the running var gets the unbiased var.
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < H * W; ++s) mean += xv[static_cast<size_t>((n * C + c) * H * W + s)];
    mean /= M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < H * W; ++s) var += std::pow(xv[static_cast<size_t>((n * C + c) * H * W + s)] - mean, 2);
    var /= M;
    const double unbiased = var * M / (M - 1);
    const size_t cc = static_cast<size_t>(c);
    // float64, a handful of operations on values of size ~1: equal to 1e-14
    CHECK(std::abs(rm.to_vector<double>()[cc] - ((1 - momentum) * rm0[cc] + momentum * mean)) <= 1e-14);
    CHECK(std::abs(rv.to_vector<double>()[cc] - ((1 - momentum) * rv0[cc] + momentum * unbiased)) <= 1e-14);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < H * W; ++s) {
        const size_t i = static_cast<size_t>((n * C + c) * H * W + s);
        const double want = (xv[i] - mean) / std::sqrt(var + eps) * gamma.to_vector<double>()[cc] +
                            beta.to_vector<double>()[cc];
        CHECK(std::abs(yv[i] - want) <= 1e-13);
      }
  }
}

TEST_CASE("batch_norm in evaluation uses the running statistics and leaves them alone", "[core][batch_norm]") {
  Generator g(2);
  Tensor x = rand64({2, 3, 2, 2}, g), gamma = rand64({3}, g), beta = rand64({3}, g);
  Tensor rm = rand64({3}, g), rv = rand64({3}, g, 0.5, 2.0);
  const auto rm0 = rm.to_vector<double>(), rv0 = rv.to_vector<double>();
  const auto y = ops::batch_norm(x, rm, rv, gamma, beta, false, 0.1, 1e-5).to_vector<double>();
  CHECK(rm.to_vector<double>() == rm0);
  CHECK(rv.to_vector<double>() == rv0);
  const auto xv = x.to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 4) % 3;
    const double want = (xv[i] - rm0[c]) / std::sqrt(rv0[c] + 1e-5) * gamma.to_vector<double>()[c] +
                        beta.to_vector<double>()[c];
    CHECK(std::abs(y[i] - want) <= 1e-14);  // a few float64 operations
  }
}

TEST_CASE("batch_norm matches finite differences in training and in evaluation", "[core][batch_norm][gradcheck]") {
  const Shape shapes[] = {{3, 2, 3, 5}, {1, 3, 2, 2}, {4, 3}, {2, 1, 1, 3}};
  int seed = 300;
  for (const Shape& s : shapes) {
    Generator g(++seed);
    const int64_t C = s[1];
    Tensor x = rand64(s, g), gamma = rand64({C}, g), beta = rand64({C}, g);
    Tensor rm = rand64({C}, g), rv = rand64({C}, g, 0.5, 2.0);
    INFO("shape " << s);
    for (bool training : {true, false}) {
      check_gradients([&](const std::vector<Tensor>& v) {
        return weighted_sum(ops::batch_norm(v[0], rm, rv, v[1], v[2], training, 0.1, 1e-5), seed);
      }, {x, gamma, beta});
      // without the affine parameters, and in training without running statistics
      check_gradients([&](const std::vector<Tensor>& v) {
        return weighted_sum(ops::batch_norm(v[0], training ? Tensor() : rm, training ? Tensor() : rv, {}, {}, training),
                            seed);
      }, {x});
    }
  }
}

TEST_CASE("batch_norm rejects bad arguments with errors that name the shapes", "[core][batch_norm][errors]") {
  const Tensor x = zeros({4, 3, 2, 2}), c3 = zeros({3}), c2 = zeros({2});
  std::string m = error_message([&] { ops::batch_norm(zeros({4}), {}, {}, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("batch_norm") && Catch::Contains("rank >= 2") && Catch::Contains("[4]"));
  m = error_message([&] { ops::batch_norm(x, c2, c2, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("running_mean has shape [2]") && Catch::Contains("expected [3]") &&
                    Catch::Contains("[4, 3, 2, 2]"));
  m = error_message([&] { ops::batch_norm(x, c3, c3, c2, {}, true); });
  CHECK_THAT(m, Catch::Contains("weight has shape [2]"));
  m = error_message([&] { ops::batch_norm(x, {}, {}, {}, {}, false); });
  CHECK_THAT(m, Catch::Contains("evaluation mode needs running_mean"));
  m = error_message([&] { ops::batch_norm(zeros({1, 3, 1, 1}), c3, c3, {}, {}, true); });
  CHECK_THAT(m, Catch::Contains("more than one value per channel") && Catch::Contains("[1, 3, 1, 1]"));
  m = error_message([&] { ops::batch_norm(x, c3, ones({3}), {}, {}, true, 0.1, 0.0); });
  CHECK_THAT(m, Catch::Contains("eps > 0"));
}

TEST_CASE("batch_norm in evaluation over an empty batch gives dgamma = dbeta = 0 even in reused NaN memory",
          "[core][batch_norm]") {
  // Σ over no element is 0, as in PyTorch. The backward forms dγ = (Σ dy·(x − mean))·invstd from
  // the forward's save_mean/save_invstd: those must be written (from the running statistics)
  // even when x is empty, else dγ = 0·(whatever the fresh memory held) is NaN for a NaN there.
  // Freed NaN blocks of their size just before the op make that the likely case (the CPU
  // allocator hands back a freed block of the same size class).
  for (DType dtype : {DType::Float64, DType::Float32}) {
    for (const Shape& shape : {Shape{0, 2, 5, 5}, Shape{0, 2}, Shape{3, 2, 0}}) {
      INFO("dtype " << dtype << ", x " << shape);
      Generator g(400);
      const TensorOptions opts(dtype);
      const Tensor x = rand64(shape, g).to(dtype).requires_grad_();
      const Tensor gamma = rand64({2}, g).to(dtype).requires_grad_(), beta = rand64({2}, g).to(dtype).requires_grad_();
      const Tensor rm = rand64({2}, g).to(dtype), rv = rand64({2}, g, 0.5, 2.0).to(dtype);
      {
        std::vector<Tensor> poison;
        for (int i = 0; i < 8; ++i) poison.push_back(full({2}, std::nan(""), opts));
      }
      const Tensor y = ops::batch_norm(x, rm, rv, gamma, beta, false);
      CHECK(y.shape() == shape);
      y.sum().backward();
      CHECK(x.grad().shape() == shape);
      CHECK(gamma.grad().to(DType::Float64).to_vector<double>() == std::vector<double>{0.0, 0.0});
      CHECK(beta.grad().to(DType::Float64).to_vector<double>() == std::vector<double>{0.0, 0.0});
    }
  }
}

TEST_CASE("batch_norm in evaluation over zero channels gives empty outputs and gradients", "[core][batch_norm]") {
  // x [N, 0, S]: no channel to normalise; forward and backward run through (the backward of the
  // sum views the empty gradient, which needs Tensor::is_contiguous to hold for no element).
  for (const Shape& shape : {Shape{1, 0, 3}, Shape{2, 0, 3}, Shape{2, 0}}) {
    INFO("x " << shape);
    const Tensor x = zeros(shape, DType::Float64).requires_grad_();
    const Tensor y = ops::batch_norm(x, zeros({0}, DType::Float64), ones({0}, DType::Float64), {}, {}, false);
    CHECK(y.shape() == shape);
    y.sum().backward();
    CHECK(x.grad().shape() == shape);
  }
}
