// Tests for optim/sgd.* and optim/optimizer.*: the SGD rules (plain, momentum with
// dampening, Nesterov with weight decay) against sequences computed here by hand in double,
// parameter groups (their own lrs and options, the rest taken from the optimizer), skipped
// parameters, exposed state and the option / parameter errors.
#include <catch2/catch.hpp>

#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/optim/fixtures.h"

using namespace minidl;
using namespace minidl::optim_testing;

namespace {

// PyTorch's SGD, written out independently of the kernel, one scalar at a time.
struct HandSGD {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::vector<double> buf;
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + weight_decay * p[i];
      if (momentum != 0) {
        buf[i] = first ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

void run_against_hand(const optim::SGDOptions& o) {
  Tensor p = param64(kStart);
  optim::SGD sgd({p}, o);
  HandSGD hand{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, {}};
  std::vector<double> expected = kStart;
  for (const auto& g : kGrads) {
    p.set_grad(from_vector<double>(g));
    sgd.step();
    hand.step(expected, g);
    check_close(p, expected);
    if (o.momentum != 0) {
      const optim::SGDParamState* s = sgd.find_state(p);
      REQUIRE(s != nullptr);
      check_close(s->momentum_buffer, hand.buf);
    }
  }
}

}  // namespace

TEST_CASE("plain SGD subtracts lr times the gradient", "[optim]") {
  run_against_hand({.lr = 0.1});
}

TEST_CASE("SGD with momentum and dampening matches a hand-computed sequence", "[optim]") {
  run_against_hand({.lr = 0.05, .momentum = 0.9, .dampening = 0.3});
}

TEST_CASE("SGD with nesterov momentum and weight decay matches a hand-computed sequence", "[optim]") {
  run_against_hand({.lr = 0.1, .momentum = 0.8, .dampening = 0, .weight_decay = 0.01, .nesterov = true});
}

TEST_CASE("SGD without momentum keeps no momentum buffer", "[optim]") {
  Tensor p = param64(kStart);
  optim::SGD sgd({p}, {.lr = 0.1, .weight_decay = 0.5});
  p.set_grad(from_vector<double>(kGrads[0]));
  sgd.step();
  const optim::SGDParamState* s = sgd.find_state(p);
  CHECK((s == nullptr || !s->momentum_buffer.defined()));
}

TEST_CASE("SGD param groups use their own learning rates", "[optim]") {
  Tensor a = param64({1.0, 2.0}), b = param64({3.0});
  optim::SGD sgd(std::vector<optim::ParamGroup>{{{a}, 0.1}, {{b}, 0.5}}, {.momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    a.set_grad(from_vector<double>({1.0, -1.0}));
    b.set_grad(from_vector<double>({2.0}));
    sgd.step();
  }
  // Constant gradient g with momentum 0.9: buf = g, 1.9g, 2.71g; total lr·g·(1 + 1.9 + 2.71).
  const double sum = 1 + 1.9 + 2.71;
  check_close(a, {1.0 - 0.1 * sum, 2.0 + 0.1 * sum});
  check_close(b, {3.0 - 0.5 * 2.0 * sum});
  CHECK(sgd.param_groups()[1].lr == 0.5);
}

TEST_CASE("SGD param groups use their own momentum, dampening, weight decay and nesterov", "[optim]") {
  Tensor a = param64(kStart), b = param64(kStart), c = param64(kStart);
  optim::SGD sgd({{{a}, {.lr = 0.1, .weight_decay = 0.01, .momentum = 0.8, .nesterov = true}},
                  {{b}, {.dampening = 0.3}},
                  {{c}, {.momentum = 0.0}}},
                 {.lr = 0.05, .momentum = 0.9});
  HandSGD hand_a{0.1, 0.8, 0.0, 0.01, true, {}};
  HandSGD hand_b{0.05, 0.9, 0.3, 0.0, false, {}};
  HandSGD hand_c{0.05, 0.0, 0.0, 0.0, false, {}};
  std::vector<double> ea = kStart, eb = kStart, ec = kStart;
  for (size_t k = 0; k < kGrads.size(); ++k) {
    for (Tensor* p : {&a, &b, &c}) p->set_grad(from_vector<double>(kGrads[k]));
    sgd.step();
    hand_a.step(ea, kGrads[k]);
    hand_b.step(eb, kGrads[k]);
    hand_c.step(ec, kGrads[k]);
    INFO("step " << k + 1);
    check_close(a, ea);
    check_close(b, eb);
    check_close(c, ec);
  }
  check_close(sgd.find_state(b)->momentum_buffer, hand_b.buf);
  // The group without momentum keeps no buffer, though the optimizer's momentum is 0.9.
  CHECK((sgd.find_state(c) == nullptr || !sgd.find_state(c)->momentum_buffer.defined()));
}

TEST_CASE("an SGD group given no options, or only an lr, takes the rest from the optimizer", "[optim]") {
  Tensor a = param64({1.0}), b = param64({2.0});
  // `{}` is "no options", not lr 0.
  optim::SGD sgd({{{a}, {}}, {{b}, 0.5}}, {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  const auto& groups = sgd.param_groups();
  CHECK(groups[0].lr == 0.05);
  CHECK(groups[1].lr == 0.5);
  for (const auto& group : groups) {
    CHECK(group.options.momentum == 0.9);
    CHECK(group.options.dampening == 0.1);
    CHECK(group.options.weight_decay == 0.01);
    CHECK(group.options.nesterov == false);
    CHECK_FALSE(group.options.beta1.has_value());  // not an SGD option
  }
  CHECK(sgd.group_options(groups[1]).lr == 0.5);
  CHECK(sgd.group_options(groups[1]).momentum == 0.9);
}

TEST_CASE("SGD rejects bad group options, naming the group", "[optim]") {
  Tensor a = param64({1.0}), b = param64({2.0});
  CHECK_THROWS_WITH(optim::SGD({{{a}}, {{b}, {.weight_decay = -0.5}}}, {}),
                    Catch::Contains("SGD: invalid weight_decay -0.5 in param group 1 (expected >= 0)"));
  CHECK_THROWS_WITH(optim::SGD({{{a}, {.momentum = -0.9}}}, {}),
                    Catch::Contains("SGD: invalid momentum -0.9 in param group 0"));
  // The group's nesterov meets the optimizer's dampening.
  CHECK_THROWS_WITH(optim::SGD({{{a}, {.nesterov = true}}}, {.momentum = 0.9, .dampening = 0.2}),
                    Catch::Contains("nesterov momentum requires momentum > 0 and dampening == 0, got momentum 0.9 "
                                    "and dampening 0.2 in param group 0"));
  CHECK_THROWS_WITH(optim::SGD({{{a}, {.beta2 = 0.99}}}, {}),
                    Catch::Contains("SGD: param group 0 sets beta2, which SGD does not have"));
}

TEST_CASE("SGD skips parameters whose grad is undefined", "[optim]") {
  Tensor used = param64({1.0}), unused = param64({5.0});
  optim::SGD sgd({used, unused}, {.lr = 0.1, .momentum = 0.9});
  used.set_grad(from_vector<double>({1.0}));
  sgd.step();
  check_close(used, {0.9});
  check_close(unused, {5.0});
  CHECK(sgd.find_state(unused) == nullptr);
}

TEST_CASE("SGD on float32 parameters updates with the same rule", "[optim]") {
  Tensor p = from_vector<float>({1.0f, -2.0f});
  p.requires_grad_(true);
  optim::SGD sgd({p}, {.lr = 0.5, .momentum = 0.5});
  p.set_grad(from_vector<float>({1.0f, 1.0f}));
  sgd.step();  // buf = 1, p = [0.5, -2.5]
  sgd.step();  // buf = 1.5, p = [-0.25, -3.25]
  // Exact: every value is a multiple of 1/4.
  CHECK(p.to_vector<float>() == std::vector<float>{-0.25f, -3.25f});
}

TEST_CASE("SGD training lowers a linear model's MSE loss", "[optim]") {
  Generator gen(9);
  nn::Linear model(4, 1, true, &gen);
  const Tensor x = randn(Shape{32, 4}, {}, &gen);
  const Tensor y = ops::sum(x, 1, /*keepdim=*/true);  // [32, 1] target: the sum of the features
  optim::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::MSELoss mse;
  const double first = mse(model(x), y).item();
  for (int i = 0; i < 50; ++i) {
    sgd.zero_grad();
    Tensor loss = mse(model(x), y);
    loss.backward();
    sgd.step();
  }
  CHECK(mse(model(x), y).item() < 0.01 * first);
}

TEST_CASE("Optimizer::zero_grad sets the grads to undefined", "[optim]") {
  Tensor p = param64({1.0});
  p.set_grad(from_vector<double>({3.0}));
  optim::SGD sgd({p});
  sgd.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("SGD rejects bad options with a clear error", "[optim]") {
  Tensor p = param64({1.0});
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = -0.1}), Catch::Contains("SGD: invalid learning rate -0.1"));
  CHECK_THROWS_WITH(optim::SGD({p}, {.momentum = -1}), Catch::Contains("invalid momentum"));
  CHECK_THROWS_WITH(optim::SGD({p}, {.weight_decay = -1}), Catch::Contains("invalid weight_decay"));
  CHECK_THROWS_WITH(optim::SGD({p}, {.nesterov = true}), Catch::Contains("nesterov momentum requires momentum > 0"));
  CHECK_THROWS_WITH(optim::SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Catch::Contains("dampening == 0"));
  CHECK_THROWS_WITH(optim::SGD(std::vector<optim::ParamGroup>{{{p}, -1.0}}, {}),
                    Catch::Contains("invalid learning rate -1 in param group 0"));
}

TEST_CASE("optimizers reject empty, repeated, non-leaf and integer parameters", "[optim]") {
  Tensor p = param64({1.0});
  CHECK_THROWS_WITH(optim::SGD(std::vector<Tensor>{}), Catch::Contains("empty parameter list"));
  CHECK_THROWS_WITH(optim::SGD({p, p}), Catch::Contains("appears more than once"));
  CHECK_THROWS_WITH(optim::SGD({p * 2.0}), Catch::Contains("not a leaf"));
  CHECK_THROWS_WITH(optim::SGD({zeros(Shape{2}, DType::Int64)}), Catch::Contains("int64"));
  CHECK_THROWS_WITH(optim::SGD({Tensor()}), Catch::Contains("undefined"));
}
