// Tests for nn/loss.* and nn/functional.*: cross-entropy and MSE against hand computations
// in float64, their gradients, and the shape errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"

using namespace minidl;

namespace {
// Hand cross-entropy of one row: log(sum exp(z)) - z[target].
double row_cross_entropy(const std::vector<double>& z, int64_t target) {
  double s = 0;
  for (double v : z) s += std::exp(v);
  return std::log(s) - z[static_cast<size_t>(target)];
}
const std::vector<std::vector<double>> kLogits = {{1.0, 2.0, 3.0}, {0.5, -1.0, 2.0}};
const std::vector<int64_t> kTargets = {2, 0};
}  // namespace

TEST_CASE("CrossEntropyLoss matches log-sum-exp minus the target logit for each reduction", "[nn]") {
  const Tensor logits = from_vector<double>({1.0, 2.0, 3.0, 0.5, -1.0, 2.0}, Shape{2, 3});
  const Tensor targets = from_vector<int64_t>(kTargets);
  const double l0 = row_cross_entropy(kLogits[0], 2), l1 = row_cross_entropy(kLogits[1], 0);
  // 1e-12: the kernel subtracts the row max before exp and sums in another order; values are O(1).
  const double tol = 1e-12;
  CHECK(nn::CrossEntropyLoss()(logits, targets).item() == Approx((l0 + l1) / 2).margin(tol));
  CHECK(nn::CrossEntropyLoss(ops::Reduction::Sum)(logits, targets).item() == Approx(l0 + l1).margin(tol));
  const std::vector<double> none = nn::CrossEntropyLoss(ops::Reduction::None)(logits, targets).to_vector<double>();
  REQUIRE(none.size() == 2);
  CHECK(none[0] == Approx(l0).margin(tol));
  CHECK(none[1] == Approx(l1).margin(tol));
  CHECK(nn::functional::cross_entropy(logits, targets).item() == Approx((l0 + l1) / 2).margin(tol));
}

TEST_CASE("CrossEntropyLoss gradient is softmax minus one-hot over N", "[nn]") {
  Tensor logits = from_vector<double>({1.0, 2.0, 3.0, 0.5, -1.0, 2.0}, Shape{2, 3});
  logits.requires_grad_(true);
  nn::CrossEntropyLoss()(logits, from_vector<int64_t>(kTargets)).backward();
  const std::vector<double> grad = logits.grad().to_vector<double>();
  for (size_t r = 0; r < 2; ++r) {
    double s = 0;
    for (double v : kLogits[r]) s += std::exp(v);
    for (size_t c = 0; c < 3; ++c) {
      const double expected = (std::exp(kLogits[r][c]) / s - (static_cast<int64_t>(c) == kTargets[r] ? 1 : 0)) / 2;
      CHECK(grad[r * 3 + c] == Approx(expected).margin(1e-12));  // 1e-12: O(1) values, double rounding
    }
  }
}

TEST_CASE("MSELoss is the mean, sum or elementwise squared difference, with gradient 2(a-b)/n", "[nn]") {
  Tensor a = from_vector<double>({1, 2, 3, 4}, Shape{2, 2});
  a.requires_grad_(true);
  const Tensor b = from_vector<double>({0.5, 2, 5, -1}, Shape{2, 2});
  // Squares 0.25, 0, 4, 25: every value here is exact in binary, so equality is exact.
  CHECK(nn::MSELoss()(a, b).item() == (0.25 + 0 + 4 + 25) / 4);
  CHECK(nn::MSELoss(ops::Reduction::Sum)(a, b).item() == 29.25);
  CHECK(nn::MSELoss(ops::Reduction::None)(a, b).to_vector<double>() == std::vector<double>{0.25, 0, 4, 25});
  nn::MSELoss()(a, b).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.25, 0, -1, 2.5});
  CHECK(nn::functional::mse_loss(a, b).item() == 29.25 / 4);
}

TEST_CASE("MSELoss refuses inputs whose shapes or dtypes differ", "[nn]") {
  nn::MSELoss mse;
  CHECK_THROWS_WITH(mse(zeros(Shape{2, 3}), zeros(Shape{3, 2})),
                    Catch::Contains("input shape [2, 3] and target shape [3, 2] must be equal"));
  CHECK_THROWS_WITH(mse(zeros(Shape{2}), zeros(Shape{2}, DType::Float64)), Catch::Contains("dtype"));
}
