// Tests for optim/lr_scheduler.*: StepLR, CosineAnnealingLR and WarmupCosineLR values (closed
// forms computed here; nanoGPT's get_lr written out as it is there), several groups, their effect
// on the update, and argument errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <utility>
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

// nanoGPT's get_lr(it), line for line (train.py), for one group's learning_rate and min_lr.
double nanogpt_get_lr(int64_t it, double learning_rate, double min_lr, int64_t warmup_iters, int64_t lr_decay_iters) {
  if (it < warmup_iters) return learning_rate * static_cast<double>(it + 1) / static_cast<double>(warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  const double decay_ratio =
      static_cast<double>(it - warmup_iters) / static_cast<double>(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * decay_ratio));
  return min_lr + coeff * (learning_rate - min_lr);
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

TEST_CASE("WarmupCosineLR follows nanoGPT's get_lr in every group, scaled to the group's lr", "[optim]") {
  Tensor a = param64(0), b = param64(0);
  optim::AdamW adamw({{{a}, 1.0}, {{b}, {.lr = 0.3, .weight_decay = 0.0}}}, optim::AdamWOptions{.lr = 1.0});
  const int64_t warmup = 4, decay_end = 12;
  optim::WarmupCosineLR sched(adamw, warmup, decay_end, /*min_lr_ratio=*/0.1);
  CHECK(sched.base_lrs() == std::vector<double>{1.0, 0.3});
  // Iteration it uses the lr written after `it` scheduler steps (the constructor writes it = 0).
  for (int64_t it = 0; it <= 20; ++it) {
    if (it > 0) sched.step();
    INFO("it = " << it);
    // 1e-15: the same double arithmetic, perhaps ordered differently, on values of at most 1.
    CHECK(adamw.param_groups()[0].lr == Approx(nanogpt_get_lr(it, 1.0, 0.1, warmup, decay_end)).margin(1e-15));
    CHECK(adamw.param_groups()[1].lr == Approx(nanogpt_get_lr(it, 0.3, 0.03, warmup, decay_end)).margin(1e-15));
    CHECK(sched.last_lr()[1] == adamw.param_groups()[1].lr);
  }
  // The landmarks written out (group 0, lr 1, min 0.1), at the same 1e-15.
  const std::vector<std::pair<int64_t, double>> landmarks = {
      {0, 1.0 / 5},                // it = 0: first warm-up step, lr / (W + 1)
      {warmup - 1, 4.0 / 5},       // last warm-up step
      {warmup, 1.0},               // the peak: decay ratio 0
      {8, 0.1 + 0.5 * 0.9},        // the middle of the decay: cos(π/2) = 0
      {decay_end, 0.1},            // the end of the decay: min_lr
      {decay_end + 1, 0.1},        // past it: min_lr
  };
  optim::SGD sgd({param64(0)}, {.lr = 1.0});
  optim::WarmupCosineLR fresh(sgd, warmup, decay_end, 0.1);
  int64_t t = 0;
  for (const auto& [it, expected] : landmarks) {
    while (t < it) fresh.step(), ++t;
    INFO("it = " << it);
    CHECK(sgd.param_groups()[0].lr == Approx(expected).margin(1e-15));
  }
}

TEST_CASE("WarmupCosineLR without warm-up starts at the base lr and decays to its minimum", "[optim]") {
  optim::SGD sgd({param64(0)}, {.lr = 0.5});
  optim::WarmupCosineLR sched(sgd, /*warmup_iters=*/0, /*lr_decay_iters=*/4, /*min_lr_ratio=*/0.0);
  CHECK(sgd.param_groups()[0].lr == 0.5);  // exact: cos(0) = 1
  sched.step();
  sched.step();
  CHECK(sgd.param_groups()[0].lr == Approx(0.25).margin(1e-15));  // half-way
  sched.step();
  sched.step();
  CHECK(sgd.param_groups()[0].lr == Approx(0.0).margin(1e-15));  // cos(π) = -1
  sched.step();
  CHECK(sgd.param_groups()[0].lr == 0.0);  // past the end: exactly the minimum
}

TEST_CASE("WarmupCosineLR's lr at iteration k is the one the optimizer's k-th step uses", "[optim]") {
  Tensor p = param64(0.0);
  optim::SGD sgd({p}, {.lr = 1.0});
  optim::WarmupCosineLR sched(sgd, /*warmup_iters=*/3, /*lr_decay_iters=*/5, 0.1);
  double expected = 0.0;
  for (int64_t it = 0; it < 4; ++it) {
    p.set_grad(from_vector<double>({1.0}));
    sgd.step();  // p -= lr(it)·1
    sched.step();
    expected -= nanogpt_get_lr(it, 1.0, 0.1, 3, 5);
  }
  // -(1/4 + 2/4 + 3/4 + 1): 1e-15 for the rounding of four sums of values of at most 1.
  CHECK(p.item() == Approx(expected).margin(1e-15));
  CHECK(p.item() == Approx(-2.5).margin(1e-15));
}

TEST_CASE("WarmupCosineLR rejects a negative warm-up, a decay end not after it and a minimum above the lr", "[optim]") {
  optim::SGD sgd({param64(0)}, {.lr = 0.1});
  CHECK_THROWS_WITH(optim::WarmupCosineLR(sgd, -1, 10),
                    Catch::Contains("WarmupCosineLR: warmup_iters must be >= 0, got -1"));
  CHECK_THROWS_WITH(optim::WarmupCosineLR(sgd, 10, 10),
                    Catch::Contains("WarmupCosineLR: lr_decay_iters must be greater than warmup_iters, got "
                                    "lr_decay_iters 10 and warmup_iters 10"));
  CHECK_THROWS_WITH(optim::WarmupCosineLR(sgd, 0, 0), Catch::Contains("lr_decay_iters 0 and warmup_iters 0"));
  CHECK_THROWS_WITH(optim::WarmupCosineLR(sgd, 5, 10, 1.5),
                    Catch::Contains("WarmupCosineLR: min_lr_ratio must be in [0, 1] (a minimum lr of at most the base "
                                    "lr), got 1.5"));
  CHECK_THROWS_WITH(optim::WarmupCosineLR(sgd, 5, 10, -0.1), Catch::Contains("min_lr_ratio must be in [0, 1]"));
  CHECK(sgd.param_groups()[0].lr == 0.1);  // a refused schedule wrote nothing
}

TEST_CASE("schedulers reject non-positive periods and negative factors", "[optim]") {
  optim::SGD sgd({param64(0)});
  CHECK_THROWS_WITH(optim::StepLR(sgd, 0), Catch::Contains("StepLR: step_size must be positive, got 0"));
  CHECK_THROWS_WITH(optim::StepLR(sgd, 1, -0.5), Catch::Contains("gamma must be >= 0"));
  CHECK_THROWS_WITH(optim::CosineAnnealingLR(sgd, 0), Catch::Contains("t_max must be positive"));
  CHECK_THROWS_WITH(optim::CosineAnnealingLR(sgd, 3, -1), Catch::Contains("eta_min must be >= 0"));
}
