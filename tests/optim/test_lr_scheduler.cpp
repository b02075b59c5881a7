// Tests for optim/lr_scheduler.*: StepLR and CosineAnnealingLR values (closed forms
// computed here), several groups, their effect on the update, and argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <vector>

#include "core/tensor.h"
#include "optim/optim.h"

using namespace minidl;

namespace {
Tensor param64(double value) {
  Tensor p = from_vector<double>({value});
  p.requires_grad_(true);
  return p;
}
}  // namespace

TEST_CASE("StepLR multiplies every group's lr by gamma each step_size steps", "[optim]") {
  Tensor a = param64(0), b = param64(0);
  optim::SGD sgd(std::vector<optim::ParamGroup>{{{a}, 1.0}, {{b}, 0.1}}, {});
  optim::StepLR sched(sgd, /*step_size=*/2, /*gamma=*/0.5);
  CHECK(sched.last_lr() == std::vector<double>{1.0, 0.1});
  const std::vector<double> factors = {1, 0.5, 0.5, 0.25, 0.25, 0.125};  // t = 1..6
  for (size_t t = 0; t < factors.size(); ++t) {
    sched.step();
    INFO("t = " << t + 1);
    // 1e-15: pow of a power of two is exact; the 0.1 group rounds once in the product.
    CHECK(sgd.param_groups()[0].lr == Approx(factors[t]).margin(1e-15));
    CHECK(sgd.param_groups()[1].lr == Approx(0.1 * factors[t]).margin(1e-15));
    CHECK(sched.last_lr()[0] == sgd.param_groups()[0].lr);
  }
  CHECK(sched.last_epoch() == 6);
}

TEST_CASE("CosineAnnealingLR follows eta_min + (base - eta_min)(1 + cos(pi t / T)) / 2", "[optim]") {
  Tensor p = param64(0);
  optim::Adam adam({p}, {.lr = 0.1});
  const double eta_min = 0.01;
  optim::CosineAnnealingLR sched(adam, /*t_max=*/4, eta_min);
  CHECK(adam.param_groups()[0].lr == 0.1);  // construction leaves t = 0 alone
  for (int t = 1; t <= 6; ++t) {
    sched.step();
    const double expected = eta_min + (0.1 - eta_min) * (1 + std::cos(std::numbers::pi * t / 4.0)) / 2;
    INFO("t = " << t);
    CHECK(adam.param_groups()[0].lr == Approx(expected).margin(1e-15));  // 1e-15: same formula, O(0.1) values
  }
  // Spot values written out: half-way is the midpoint, T_max is eta_min.
  optim::SGD sgd({param64(0)}, {.lr = 1.0});
  optim::CosineAnnealingLR plain(sgd, 2);
  plain.step();
  CHECK(sgd.param_groups()[0].lr == Approx(0.5).margin(1e-15));  // cos(pi/2) rounds to 6e-17
  plain.step();
  CHECK(sgd.param_groups()[0].lr == Approx(0.0).margin(1e-15));
}

TEST_CASE("the scheduled lr is the one the next optimizer step uses", "[optim]") {
  Tensor p = param64(1.0);
  optim::SGD sgd({p}, {.lr = 1.0});
  optim::StepLR sched(sgd, 1, 0.5);
  sched.step();  // lr = 0.5
  p.set_grad(from_vector<double>({1.0}));
  sgd.step();
  CHECK(p.item() == 0.5);  // exact: 1 - 0.5·1
}

TEST_CASE("schedulers reject non-positive periods and negative factors", "[optim]") {
  optim::SGD sgd({param64(0)});
  CHECK_THROWS_WITH(optim::StepLR(sgd, 0), Catch::Contains("StepLR: step_size must be positive, got 0"));
  CHECK_THROWS_WITH(optim::StepLR(sgd, 1, -0.5), Catch::Contains("gamma must be >= 0"));
  CHECK_THROWS_WITH(optim::CosineAnnealingLR(sgd, 0), Catch::Contains("t_max must be positive"));
  CHECK_THROWS_WITH(optim::CosineAnnealingLR(sgd, 3, -1), Catch::Contains("eta_min must be >= 0"));
}
