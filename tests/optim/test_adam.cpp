// Tests for optim/adam.*: Adam (L2 weight decay) and AdamW (decoupled) against sequences
// computed here by hand in double, per-parameter step counts and state, groups with options of
// their own (and the ones they take from the optimizer), and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/optim/fixtures.h"

using namespace minidl;
using namespace minidl::optim_testing;

namespace {

// PyTorch's Adam / AdamW, written out independently of the kernel, one scalar at a time.
struct HandAdam {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  std::vector<double> m, v;
  int64_t t = 0;
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled) {
        p[i] *= 1 - lr * weight_decay;
      } else {
        g += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double mhat = m[i] / (1 - std::pow(beta1, static_cast<double>(t)));
      const double vhat = v[i] / (1 - std::pow(beta2, static_cast<double>(t)));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

template <typename Opt>
void run_against_hand(Opt& opt, Tensor& p, HandAdam hand) {
  std::vector<double> expected = kStart;
  for (const auto& g : kGrads) {
    p.set_grad(from_vector<double>(g));
    opt.step();
    hand.step(expected, g);
    check_close(p, expected);
    const optim::AdamParamState* s = opt.find_state(p);
    REQUIRE(s != nullptr);
    CHECK(s->step == hand.t);
    check_close(s->exp_avg, hand.m);
    check_close(s->exp_avg_sq, hand.v);
  }
}

}  // namespace

TEST_CASE("Adam with L2 weight decay matches a hand-computed sequence", "[optim]") {
  Tensor p = param64(kStart);
  optim::Adam adam({p}, {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1});
  run_against_hand(adam, p, HandAdam{0.1, 0.8, 0.95, 1e-6, 0.1, false, {}, {}});
}

TEST_CASE("Adam with default options matches a hand-computed sequence", "[optim]") {
  Tensor p = param64(kStart);
  optim::Adam adam({p});
  run_against_hand(adam, p, HandAdam{1e-3, 0.9, 0.999, 1e-8, 0.0, false, {}, {}});
}

TEST_CASE("AdamW decays the weights apart from the gradient and matches a hand-computed sequence", "[optim]") {
  Tensor p = param64(kStart);
  optim::AdamW adamw({p}, {.lr = 0.05, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.2});
  run_against_hand(adamw, p, HandAdam{0.05, 0.9, 0.99, 1e-8, 0.2, true, {}, {}});
}

TEST_CASE("AdamW defaults to weight decay 1e-2", "[optim]") {
  Tensor p = param64(kStart);
  optim::AdamW adamw({p});
  CHECK(adamw.options().weight_decay == 1e-2);
  run_against_hand(adamw, p, HandAdam{1e-3, 0.9, 0.999, 1e-8, 1e-2, true, {}, {}});
}

TEST_CASE("Adam counts steps per parameter and skips parameters without a grad", "[optim]") {
  Tensor a = param64({1.0}), b = param64({2.0});
  optim::Adam adam({a, b}, {.lr = 0.1});
  HandAdam hand_a{0.1, 0.9, 0.999, 1e-8, 0, false, {}, {}}, hand_b = hand_a;
  std::vector<double> ea = {1.0}, eb = {2.0};
  for (int step = 0; step < 4; ++step) {
    a.set_grad(from_vector<double>({0.5 + step}));
    hand_a.step(ea, {0.5 + step});
    if (step % 2 == 1) {  // b gets a gradient on every other step only
      b.set_grad(from_vector<double>({-1.0 * step}));
      hand_b.step(eb, {-1.0 * step});
    } else {
      b.set_grad(Tensor());
    }
    adam.step();
  }
  CHECK(adam.find_state(a)->step == 4);
  CHECK(adam.find_state(b)->step == 2);
  check_close(a, ea);
  check_close(b, eb);
}

TEST_CASE("Adam param groups use their own learning rates", "[optim]") {
  Tensor a = param64({1.0}), b = param64({1.0});
  optim::Adam adam(std::vector<optim::ParamGroup>{{{a}, 0.1}, {{b}, 0.01}}, {});
  a.set_grad(from_vector<double>({3.0}));
  b.set_grad(from_vector<double>({3.0}));
  adam.step();
  // First Adam step: mhat = g, vhat = g², so the step is lr·g/(|g| + eps).
  check_close(a, {1.0 - 0.1 * 3.0 / (3.0 + 1e-8)});
  check_close(b, {1.0 - 0.01 * 3.0 / (3.0 + 1e-8)});
}

TEST_CASE("AdamW param groups each decay with their own weight_decay, as PyTorch's AdamW does", "[optim]") {
  // nanoGPT's split: decay on the weights, none on the biases; lr and betas from the options.
  Tensor weight = param64(kStart), bias = param64({0.5, -0.25, 2.0});
  optim::AdamW adamw({{{weight}, {.weight_decay = 0.1}}, {{bias}, {.weight_decay = 0.0}}},
                     optim::AdamWOptions{.lr = 0.05, .beta2 = 0.99});
  HandAdam hand_weight{0.05, 0.9, 0.99, 1e-8, 0.1, true, {}, {}};
  HandAdam hand_bias{0.05, 0.9, 0.99, 1e-8, 0.0, true, {}, {}};
  std::vector<double> expected_weight = kStart, expected_bias = {0.5, -0.25, 2.0};
  for (size_t k = 0; k < kGrads.size(); ++k) {
    const std::vector<double>& g = kGrads[k];
    const std::vector<double> g_bias = {-g[2], g[0], 0.5 * g[1]};
    weight.set_grad(from_vector<double>(g));
    bias.set_grad(from_vector<double>(g_bias));
    adamw.step();
    hand_weight.step(expected_weight, g);
    hand_bias.step(expected_bias, g_bias);
    INFO("step " << k + 1);
    check_close(weight, expected_weight);
    check_close(bias, expected_bias);
    check_close(adamw.find_state(bias)->exp_avg_sq, hand_bias.v);
  }
}

TEST_CASE("the GPT recipe of optim/optimizer.h decays a Linear's weight and not its bias", "[optim]") {
  Generator gen(3);
  nn::Linear model(4, 3, true, &gen);
  std::vector<Tensor> decay, no_decay;  // as written in optim/optimizer.h
  for (const Tensor& p : model.parameters()) (p.shape().rank() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamW opt({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                   optim::AdamWOptions{.lr = 1e-3, .beta2 = 0.99});
  REQUIRE(decay.size() == 1);
  REQUIRE(no_decay.size() == 1);
  CHECK(opt.group_options(opt.param_groups()[0]).weight_decay == 0.1);
  CHECK(opt.group_options(opt.param_groups()[1]).weight_decay == 0.0);
  CHECK(opt.group_options(opt.param_groups()[1]).beta2 == 0.99);
  CHECK(opt.group_options(opt.param_groups()[1]).lr == 1e-3);
  // With zero gradients Adam's own step is 0·lr/(0 + eps) = 0: only the decay moves a parameter.
  const std::vector<float> w0 = decay[0].to_vector<float>(), b0 = no_decay[0].to_vector<float>();
  for (Tensor& p : model.parameters()) p.set_grad(zeros_like(p));
  opt.step();
  CHECK(no_decay[0].to_vector<float>() == b0);  // exact: multiplied by 1, minus 0
  const std::vector<float> w1 = decay[0].to_vector<float>();
  for (size_t i = 0; i < w0.size(); ++i) {
    // 1e-6 relative: one float32 rounding of the factor and one of the product (6e-8 each), far
    // below the decay itself (1e-4 relative).
    CHECK(w1[i] == Approx(static_cast<double>(w0[i]) * (1 - 1e-3 * 0.1)).epsilon(1e-6));
    CHECK(w1[i] != w0[i]);
  }
}

TEST_CASE("a param group takes every Adam option it does not set from the optimizer", "[optim]") {
  Tensor a = param64(kStart), b = param64(kStart), c = param64(kStart);
  const optim::AdamOptions defaults{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.2};
  optim::Adam adam({{{a}, {.beta1 = 0.5}}, {{b}}, {{c}, {.lr = 0.01, .eps = 1e-3}}}, defaults);
  const auto& groups = adam.param_groups();
  REQUIRE(groups.size() == 3);
  // Completed in place, as PyTorch fills each group's dict: every option of Adam is set.
  CHECK(groups[0].lr == 0.1);
  CHECK(groups[0].options.beta1 == 0.5);
  CHECK(groups[0].options.beta2 == 0.9);
  CHECK(groups[0].options.eps == 1e-6);
  CHECK(groups[0].options.weight_decay == 0.2);
  CHECK_FALSE(groups[0].options.momentum.has_value());  // not an Adam option
  CHECK(groups[1].lr == 0.1);
  CHECK(groups[1].options.beta1 == 0.8);
  CHECK(groups[2].lr == 0.01);
  CHECK(groups[2].options.eps == 1e-3);
  CHECK(groups[2].options.beta1 == 0.8);

  HandAdam hand_a{0.1, 0.5, 0.9, 1e-6, 0.2, false, {}, {}};
  HandAdam hand_b{0.1, 0.8, 0.9, 1e-6, 0.2, false, {}, {}};
  HandAdam hand_c{0.01, 0.8, 0.9, 1e-3, 0.2, false, {}, {}};
  std::vector<double> ea = kStart, eb = kStart, ec = kStart;
  for (size_t k = 0; k < 3; ++k) {
    for (Tensor* p : {&a, &b, &c}) p->set_grad(from_vector<double>(kGrads[k]));
    adam.step();
    hand_a.step(ea, kGrads[k]);
    hand_b.step(eb, kGrads[k]);
    hand_c.step(ec, kGrads[k]);
  }
  check_close(a, ea);
  check_close(b, eb);
  check_close(c, ec);
}

TEST_CASE("an Adam group's options may change between steps, as a schedule changes its lr", "[optim]") {
  Tensor p = param64(kStart);
  optim::AdamW adamw({{{p}, {.weight_decay = 0.0}}}, optim::AdamWOptions{.lr = 0.05});
  HandAdam hand{0.05, 0.9, 0.999, 1e-8, 0.0, true, {}, {}};
  std::vector<double> expected = kStart;
  for (size_t k = 0; k < 4; ++k) {
    if (k == 2) {
      adamw.param_groups()[0].options.weight_decay = 0.3;
      hand.weight_decay = 0.3;
    }
    p.set_grad(from_vector<double>(kGrads[k]));
    adamw.step();
    hand.step(expected, kGrads[k]);
  }
  check_close(p, expected);
}

TEST_CASE("Adam and AdamW reject bad group options, naming the group", "[optim]") {
  Tensor a = param64({1.0}), b = param64({2.0});
  CHECK_THROWS_WITH(optim::AdamW({{{a}}, {{b}, {.weight_decay = -0.1}}}, {}),
                    Catch::Contains("AdamW: invalid weight_decay -0.1 in param group 1 (expected >= 0)"));
  CHECK_THROWS_WITH(optim::Adam({{{a}, {.lr = -0.5}}}, {}),
                    Catch::Contains("Adam: invalid learning rate -0.5 in param group 0"));
  CHECK_THROWS_WITH(optim::Adam({{{a}, {.beta1 = 1.0}}}, {}),
                    Catch::Contains("Adam: invalid beta1 1 in param group 0 (expected 0 <= beta1 < 1)"));
  CHECK_THROWS_WITH(optim::AdamW({{{a}, {.eps = -1.0}}}, {}),
                    Catch::Contains("AdamW: invalid eps -1 in param group 0"));
  CHECK_THROWS_WITH(optim::Adam({{{a}, {.momentum = 0.9}}}, {}),
                    Catch::Contains("Adam: param group 0 sets momentum, which Adam does not have"));
  CHECK_THROWS_WITH(optim::AdamW({{{a}}, {{b}, {.nesterov = true}}}, {}),
                    Catch::Contains("AdamW: param group 1 sets nesterov, which AdamW does not have"));
}

TEST_CASE("Adam and AdamW reject bad options with a clear error", "[optim]") {
  Tensor p = param64({1.0});
  CHECK_THROWS_WITH(optim::Adam({p}, {.lr = -1}), Catch::Contains("Adam: invalid learning rate -1"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.beta1 = 1.0}), Catch::Contains("invalid beta1 1 (expected 0 <= beta1 < 1)"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.beta2 = -0.1}), Catch::Contains("invalid beta2"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.eps = -1e-8}), Catch::Contains("invalid eps"));
  CHECK_THROWS_WITH(optim::AdamW({p}, {.weight_decay = -0.1}), Catch::Contains("AdamW: invalid weight_decay"));
  CHECK_THROWS_WITH(optim::AdamW({p}, {.beta2 = 1.0}), Catch::Contains("AdamW: invalid beta2"));
}

TEST_CASE("AdamW on float32 parameters computes its scalar constants in double, as PyTorch does", "[optim]") {
  // Parameters start at 0, so after each step they hold the sum of the updates alone (about lr
  // each): an error in a constant shows in full instead of hiding below the ulps of O(1) values.
  // Rounding 1 - beta2 in float32 (0.00099998713 for 0.001) makes every update 6.4e-6 x lr too
  // large; the tolerance, 1e-6 x lr, is well above the float32 rounding of these O(lr) values
  // (about 6e-8 x lr per operation, a dozen operations per step) and well below that error.
  const double lr = 1e-3;
  Tensor p = from_vector<float>({0.0f, 0.0f, 0.0f});
  p.requires_grad_(true);
  optim::AdamW adamw({p}, {.lr = lr});
  HandAdam hand{lr, 0.9, 0.999, 1e-8, 1e-2, true, {}, {}};
  std::vector<double> expected = {0.0, 0.0, 0.0};
  for (size_t s = 0; s < 3; ++s) {
    std::vector<float> g(kGrads[s].begin(), kGrads[s].end());
    p.set_grad(from_vector<float>(g));
    adamw.step();
    hand.step(expected, kGrads[s]);
    const std::vector<float> got = p.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("step " << s + 1 << ", element " << i);
      CHECK(static_cast<double>(got[i]) == Approx(expected[i]).margin(1e-6 * lr).epsilon(0));
    }
  }
}
