// Tests for optim/optimizer_state.cpp and the scheduler state: an optimizer (SGD with
// momentum, Adam, AdamW, AdamW with param groups of their own options) and a schedule restored
// from state_dict() continue bit for bit like the originals; entries are keyed by parameter name;
// each group's members and options are saved and must match on load; a state written before
// groups had options still loads; loads are all or nothing with one error that lists each
// problem; a loaded state is a private copy.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "optim/optim.h"
#include "tests/optim/fixtures.h"

using namespace minidl;
using namespace minidl::optim_testing;

namespace {

// Two named parameters of different shapes; `shift` changes the first value (B starts elsewhere than A).
struct TwoParams {
  Tensor w, b;
  explicit TwoParams(double shift) {
    w = from_vector<double>({1.0 + shift, -2.0, 0.5, 0.25, 3.0, -1.5}, {2, 3});
    b = from_vector<double>({0.1, -0.2});
    w.requires_grad_(true);
    b.requires_grad_(true);
  }
  optim::NamedParameters named() const { return {{"fc.weight", w}, {"fc.bias", b}}; }
  std::vector<Tensor> list() const { return {w, b}; }
  void set_grads(size_t k) {
    const std::vector<double>& g = kGrads[k % kGrads.size()];
    w.set_grad(from_vector<double>({g[0], g[1], g[2], -g[0], 0.5 * g[1], g[2] * g[2]}, {2, 3}));
    b.set_grad(from_vector<double>({g[1], -g[2]}));
  }
  // Both tensors' values become those of `other` (a fresh copy of the model).
  void copy_values(const TwoParams& other) {
    w.detach().copy_(other.w);
    b.detach().copy_(other.b);
  }
};

bool same_bits(const Tensor& a, const Tensor& b) { return a.to_vector<double>() == b.to_vector<double>(); }

// Runs `first` steps on A, copies A's values and optimizer state into B, then `then` steps on
// both: B must match A exactly (the same double arithmetic on the same inputs).
template <typename MakeOpt>
void check_resume_is_exact(MakeOpt make, size_t first, size_t then) {
  TwoParams a(0), b(1);
  auto opt_a = make(a.list());
  for (size_t k = 0; k < first; ++k) {
    a.set_grads(k);
    opt_a->step();
  }
  const optim::OptimizerState saved = opt_a->state_dict(a.named());
  auto opt_b = make(b.list());
  b.copy_values(a);
  opt_b->load_state_dict(saved, b.named());
  for (size_t k = first; k < first + then; ++k) {
    a.set_grads(k);
    b.set_grads(k);
    opt_a->step();
    opt_b->step();
  }
  CHECK(same_bits(a.w, b.w));
  CHECK(same_bits(a.b, b.b));
}

}  // namespace

TEST_CASE("SGD momentum state is keyed by parameter name and resumes exactly", "[optim]") {
  TwoParams p(0);
  optim::SGD sgd(p.list(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  optim::OptimizerState before = sgd.state_dict(p.named());
  CHECK(before.tensors.empty());  // no step yet, no buffers
  p.set_grads(0);
  sgd.step();
  optim::OptimizerState s = sgd.state_dict(p.named());
  CHECK(s.optimizer == "SGD");
  REQUIRE(s.tensors.size() == 2);
  CHECK(s.tensors.count("fc.weight.momentum_buffer") == 1);
  CHECK(s.tensors.at("fc.bias.momentum_buffer").shape() == Shape{2});
  CHECK(s.counters.empty());
  CHECK(s.hyperparameters.at("momentum") == 0.9);
  CHECK(s.hyperparameters.at("nesterov") == 1.0);
  CHECK(s.group_lrs == std::vector<double>{0.1});

  check_resume_is_exact(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::SGD>(std::move(ps), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1});
      },
      3, 4);
}

TEST_CASE("Adam and AdamW moments and step counts resume exactly", "[optim]") {
  check_resume_is_exact(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::Adam>(std::move(ps), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
      },
      4, 3);
  check_resume_is_exact(
      [](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWOptions{.lr = 0.02}); },
      2, 5);

  TwoParams p(0);
  optim::AdamW adamw(p.list(), {.lr = 0.01});
  for (size_t k = 0; k < 3; ++k) {
    p.set_grads(k);
    adamw.step();
  }
  const optim::OptimizerState s = adamw.state_dict(p.named());
  CHECK(s.optimizer == "AdamW");
  CHECK(s.counters.at("fc.weight.step") == 3);
  CHECK(s.counters.at("fc.bias.step") == 3);
  CHECK(s.tensors.count("fc.weight.exp_avg") == 1);
  CHECK(s.tensors.count("fc.weight.exp_avg_sq") == 1);
  CHECK(s.hyperparameters.at("weight_decay") == 0.01);
}

TEST_CASE("a loaded optimizer state is a copy and brings back the groups' lrs", "[optim]") {
  TwoParams a(0), b(0);
  optim::SGD opt_a(a.list(), {.lr = 0.1, .momentum = 0.9});
  a.set_grads(0);
  opt_a.step();
  opt_a.param_groups()[0].lr = 0.025;  // as a schedule would
  optim::OptimizerState s = opt_a.state_dict(a.named());
  optim::SGD opt_b(b.list(), {.lr = 0.1, .momentum = 0.9});
  opt_b.load_state_dict(s, b.named());
  CHECK(opt_b.param_groups()[0].lr == 0.025);
  const std::vector<double> loaded = opt_b.find_state(b.w)->momentum_buffer.to_vector<double>();
  s.tensors.at("fc.weight.momentum_buffer").fill_(42.0);  // shares storage with opt_a's buffer
  CHECK(opt_b.find_state(b.w)->momentum_buffer.to_vector<double>() == loaded);
}

TEST_CASE("optimizer load_state_dict lists every problem and changes nothing", "[optim]") {
  TwoParams p(0);
  optim::SGD sgd(p.list(), {.lr = 0.1, .momentum = 0.9});
  p.set_grads(0);
  sgd.step();
  const std::vector<double> buffer_before = sgd.find_state(p.w)->momentum_buffer.to_vector<double>();
  const optim::OptimizerState good = sgd.state_dict(p.named());

  optim::OptimizerState bad = good;
  bad.tensors["fc.weight.momentum_buffer"] = zeros({3, 2}, DType::Float64);
  bad.tensors["fc.bias.momentum_buffer"] = zeros({2}, DType::Float32);
  bad.tensors["fc.extra.momentum_buffer"] = zeros({2}, DType::Float64);
  bad.tensors["fc.bias.velocity"] = zeros({2}, DType::Float64);
  bad.group_lrs = {0.1, 0.2};
  bad.hyperparameters["momentum"] = 0.5;
  try {
    sgd.load_state_dict(bad, p.named());
    FAIL("load_state_dict accepted a broken state");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("nothing was loaded"));
    CHECK_THAT(msg, Catch::Contains("fc.weight.momentum_buffer: expected [2, 3] float64"));
    CHECK_THAT(msg, Catch::Contains("fc.bias.momentum_buffer: expected [2] float64"));
    CHECK_THAT(msg, Catch::Contains("unknown parameter in fc.extra.momentum_buffer"));
    CHECK_THAT(msg, Catch::Contains("unknown entry fc.bias.velocity"));
    CHECK_THAT(msg, Catch::Contains("2 param group(s)"));
    CHECK_THAT(msg, Catch::Contains("momentum is 0.5 in the state, 0.9 here"));
  }
  CHECK(sgd.find_state(p.w)->momentum_buffer.to_vector<double>() == buffer_before);
  CHECK(sgd.param_groups()[0].lr == 0.1);

  optim::AdamW adamw(p.list(), {});
  CHECK_THROWS_WITH(adamw.load_state_dict(good, p.named()), Catch::Contains("written by SGD"));

  // Adam's entries come in threes.
  optim::Adam adam(p.list(), {});
  p.set_grads(1);
  adam.step();
  optim::OptimizerState partial = adam.state_dict(p.named());
  partial.counters.erase("fc.bias.step");
  CHECK_THROWS_WITH(adam.load_state_dict(partial, p.named()),
                    Catch::Contains("fc.bias: needs exp_avg, exp_avg_sq and step together"));
  CHECK(adam.find_state(p.b)->step == 1);
}

TEST_CASE("optimizer state_dict needs a name for every parameter it updates", "[optim]") {
  TwoParams p(0);
  optim::SGD sgd(p.list(), {.lr = 0.1, .momentum = 0.9});
  const optim::NamedParameters only_weight = {{"fc.weight", p.w}};
  CHECK_THROWS_WITH(sgd.state_dict(only_weight), Catch::Contains("param 1 of group 0 (shape [2]) is not among"));
  CHECK_THROWS_WITH(sgd.load_state_dict(sgd.state_dict(p.named()), only_weight), Catch::Contains("is not among"));
}

TEST_CASE("a scheduler restored from its state continues with the same lrs", "[optim]") {
  Tensor a = param64(kStart), b = param64(kStart);
  optim::SGD opt_a({a}, {.lr = 0.1, .momentum = 0.9}), opt_b({b}, {.lr = 0.1, .momentum = 0.9});
  optim::CosineAnnealingLR sched_a(opt_a, 10, 0.001), sched_b(opt_b, 10, 0.001);
  for (int t = 0; t < 4; ++t) sched_a.step();
  const optim::LRSchedulerState s = sched_a.state();
  CHECK(s.scheduler == "CosineAnnealingLR");
  CHECK(s.last_epoch == 4);
  CHECK(s.hyperparameters.at("t_max") == 10);
  sched_b.load_state(s);
  opt_b.load_state_dict(opt_a.state_dict({{"p", a}}), {{"p", b}});
  CHECK(sched_b.last_epoch() == 4);
  CHECK(opt_b.param_groups()[0].lr == opt_a.param_groups()[0].lr);
  for (int t = 0; t < 6; ++t) {
    sched_a.step();
    sched_b.step();
    CHECK(opt_b.param_groups()[0].lr == opt_a.param_groups()[0].lr);
    CHECK(sched_b.last_lr() == sched_a.last_lr());
  }
}

TEST_CASE("scheduler load_state refuses another schedule, other hyperparameters or group count", "[optim]") {
  Tensor a = param64(kStart), b = param64(kStart);
  optim::SGD opt({a}, {.lr = 0.1});
  optim::SGD two_groups(std::vector<optim::ParamGroup>{{{a}, 0.1}, {{b}, 0.2}}, {});
  optim::StepLR step(opt, 3, 0.5);
  step.step();
  const optim::LRSchedulerState s = step.state();

  optim::CosineAnnealingLR cosine(opt, 10);
  CHECK_THROWS_WITH(cosine.load_state(s), Catch::Contains("written by StepLR"));
  optim::StepLR other_gamma(opt, 3, 0.25);
  CHECK_THROWS_WITH(other_gamma.load_state(s), Catch::Contains("hyperparameters differ"));
  optim::StepLR wider(two_groups, 3, 0.5);
  CHECK_THROWS_WITH(wider.load_state(s), Catch::Contains("2 param group(s)"));
  CHECK(wider.last_epoch() == 0);
  optim::LRSchedulerState negative = s;
  negative.last_epoch = -2;
  CHECK_THROWS_WITH(other_gamma.load_state(negative), Catch::Contains("last_epoch is negative"));
}

namespace {

// The GPT recipe on TwoParams: weight decay on the 2-D weight only.
std::unique_ptr<optim::AdamW> decay_weight_only(const TwoParams& p, double weight_decay = 0.1) {
  return std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{{p.w}, {.weight_decay = weight_decay}}, {{p.b}, {.weight_decay = 0.0}}},
      optim::AdamWOptions{.lr = 0.02, .beta2 = 0.99});
}

}  // namespace

TEST_CASE("optimizer state_dict saves each group's parameter names and options", "[optim]") {
  TwoParams p(0);
  auto adamw = decay_weight_only(p);
  const optim::OptimizerState s = adamw->state_dict(p.named());
  REQUIRE(s.param_groups.size() == 2);
  CHECK(s.param_groups[0].params == std::vector<std::string>{"fc.weight"});
  CHECK(s.param_groups[1].params == std::vector<std::string>{"fc.bias"});
  CHECK(s.param_groups[0].options.at("weight_decay") == 0.1);
  CHECK(s.param_groups[1].options.at("weight_decay") == 0.0);
  CHECK(s.param_groups[1].options.at("beta2") == 0.99);  // inherited, saved all the same
  CHECK(s.param_groups[0].options.count("lr") == 0);     // the lrs are group_lrs
  CHECK(s.group_lrs == std::vector<double>{0.02, 0.02});
  CHECK(s.hyperparameters.at("weight_decay") == 1e-2);  // the optimizer's own (default) value
}

TEST_CASE("AdamW with two groups and a WarmupCosineLR resumes bit for bit from their states", "[optim]") {
  TwoParams a(0), b(1);
  auto opt_a = decay_weight_only(a);
  opt_a->param_groups()[1].lr = 0.005;  // a group with its own lr too: the schedule scales it
  optim::WarmupCosineLR sched_a(*opt_a, /*warmup_iters=*/2, /*lr_decay_iters=*/6, /*min_lr_ratio=*/0.1);
  for (size_t k = 0; k < 3; ++k) {  // into the cosine part
    a.set_grads(k);
    opt_a->step();
    sched_a.step();
  }
  const optim::OptimizerState saved_opt = opt_a->state_dict(a.named());
  const optim::LRSchedulerState saved_sched = sched_a.state();
  CHECK(saved_sched.scheduler == "WarmupCosineLR");
  CHECK(saved_sched.last_epoch == 3);
  CHECK(saved_sched.base_lrs == std::vector<double>{0.02, 0.005});

  auto opt_b = decay_weight_only(b);
  optim::WarmupCosineLR sched_b(*opt_b, 2, 6, 0.1);
  b.copy_values(a);
  sched_b.load_state(saved_sched);
  opt_b->load_state_dict(saved_opt, b.named());
  CHECK(opt_b->param_groups()[0].lr == opt_a->param_groups()[0].lr);
  CHECK(opt_b->param_groups()[1].lr == opt_a->param_groups()[1].lr);
  for (size_t k = 3; k < 9; ++k) {  // through the end of the decay and past it
    a.set_grads(k);
    b.set_grads(k);
    opt_a->step();
    opt_b->step();
    sched_a.step();
    sched_b.step();
    CHECK(sched_b.last_lr() == sched_a.last_lr());
  }
  CHECK(same_bits(a.w, b.w));
  CHECK(same_bits(a.b, b.b));
  CHECK(opt_b->param_groups()[1].lr == 0.1 * 0.005);  // past lr_decay_iters: the group's minimum
}

TEST_CASE("optimizer load_state_dict refuses a state written with other groups", "[optim]") {
  TwoParams p(0);
  auto two_groups = decay_weight_only(p);
  p.set_grads(0);
  two_groups->step();
  const optim::OptimizerState saved = two_groups->state_dict(p.named());

  optim::AdamW one_group(p.list(), {.lr = 0.02, .beta2 = 0.99});
  CHECK_THROWS_WITH(one_group.load_state_dict(saved, p.named()),
                    Catch::Contains("the state has 2 param group(s), this AdamW has 1"));

  optim::AdamW swapped({{{p.b}, {.weight_decay = 0.1}}, {{p.w}, {.weight_decay = 0.0}}}, {.lr = 0.02, .beta2 = 0.99});
  try {
    swapped.load_state_dict(saved, p.named());
    FAIL("load_state_dict accepted groups with other members");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("param group 0 holds [fc.weight] in the state, [fc.bias] here"));
    CHECK_THAT(msg, Catch::Contains("param group 1 holds [fc.bias] in the state, [fc.weight] here"));
  }

  TwoParams q(0);
  auto other_decay = decay_weight_only(q, /*weight_decay=*/0.05);
  other_decay->param_groups()[0].lr = 0.5;
  CHECK_THROWS_WITH(other_decay->load_state_dict(saved, q.named()),
                    Catch::Contains("param group 0: weight_decay is 0.1 in the state, 0.05 here"));
  CHECK(other_decay->param_groups()[0].lr == 0.5);  // nothing was loaded
  CHECK(other_decay->find_state(q.w) == nullptr);

  optim::OptimizerState unknown = saved;
  unknown.param_groups[1].options["momentum"] = 0.9;
  unknown.param_groups[0].options.erase("beta1");
  try {
    two_groups->load_state_dict(unknown, p.named());
    FAIL("load_state_dict accepted group options AdamW does not have");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("param group 1: unknown option momentum"));
    CHECK_THAT(msg, Catch::Contains("param group 0: option beta1 is missing"));
  }
}

TEST_CASE("a state without group options (the earlier format) still loads", "[optim]") {
  // Written before groups had options: one set of hyperparameters, one lr per group.
  TwoParams a(0), b(1);
  optim::AdamW opt_a(a.list(), {.lr = 0.01, .weight_decay = 0.05});
  for (size_t k = 0; k < 2; ++k) {
    a.set_grads(k);
    opt_a.step();
  }
  optim::OptimizerState old = opt_a.state_dict(a.named());
  old.param_groups.clear();
  optim::AdamW opt_b(b.list(), {.lr = 0.01, .weight_decay = 0.05});
  b.copy_values(a);
  opt_b.load_state_dict(old, b.named());
  for (size_t k = 2; k < 5; ++k) {
    a.set_grads(k);
    b.set_grads(k);
    opt_a.step();
    opt_b.step();
  }
  CHECK(same_bits(a.w, b.w));
  CHECK(same_bits(a.b, b.b));

  // Every group then used the optimizer's options: a group that sets its own is refused.
  optim::AdamW split({{{b.w}}, {{b.b}, {.weight_decay = 0.0}}}, {.lr = 0.01, .weight_decay = 0.05});
  optim::OptimizerState old_two_groups = old;
  old_two_groups.group_lrs = {0.01, 0.01};
  CHECK_THROWS_WITH(split.load_state_dict(old_two_groups, b.named()),
                    Catch::Contains("param group 1: weight_decay is 0.05 in the state (which has one set of options "
                                    "for all groups), 0 here"));
  // Named type: `{{{b.w}}, {{b.b}}}` alone would also read as a list of two tensors.
  optim::AdamW two_plain(std::vector<optim::ParamGroup>{{{b.w}}, {{b.b}}}, {.lr = 0.01, .weight_decay = 0.05});
  two_plain.load_state_dict(old_two_groups, b.named());
  CHECK(two_plain.find_state(b.b)->step == 2);
}
