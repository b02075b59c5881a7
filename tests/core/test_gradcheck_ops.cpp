// Every differentiable op against central finite differences in float64, over 20 seeds and
// odd shapes (1, 3, 7, 31). ReLU inputs are kept away from 0, where it has no derivative.
#include <catch2/catch.hpp>

#include "tests/core/gradcheck.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

namespace {
const int64_t kOdd[] = {1, 3, 7, 31};
constexpr int kSeeds = 20;

// Shapes for the seed: cycles through the odd sizes so 20 seeds cover every pair.
std::pair<int64_t, int64_t> odd_pair(int seed) { return {kOdd[seed % 4], kOdd[(seed / 4 + seed) % 4]}; }
}  // namespace

TEST_CASE("add, sub, mul, div with broadcasting match finite differences", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor a = rand64({n, c}, g), b = rand64({c}, g), s = rand64({}, g);
    Tensor d = rand64({n, c}, g, 0.5, 2.0);  // divisors kept away from 0
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0] + v[1], seed); }, {a, b});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0] - v[1], seed); }, {a, b});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0] * v[1], seed); }, {a, b});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0] / v[1], seed); }, {a, d});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[1] / v[0], seed); }, {d, b});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0] * v[1] - v[0], seed); }, {a, s});
  }
}

TEST_CASE("matmul and linear match finite differences for odd shapes", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [m, k] = odd_pair(seed);
    const int64_t n = kOdd[(seed + 1) % 4];
    Tensor a = rand64({m, k}, g), b = rand64({k, n}, g);
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::matmul(v[0], v[1]), seed); }, {a, b});
    Tensor x = rand64({m, k}, g), w = rand64({n, k}, g), bias = rand64({n}, g);
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::linear(v[0], v[1], v[2]), seed); },
                    {x, w, bias});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::linear(v[0], v[1]), seed); }, {x, w});
  }
}

TEST_CASE("fused linear+relu matches finite differences away from the kink", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [m, k] = odd_pair(seed);
    Tensor x = rand64({m, k}, g), w = rand64({3, k}, g), b = rand64({3}, g);
    // Skip seeds where some pre-activation is within 1e-3 of 0 (the derivative jumps there).
    bool near_kink = false;
    {
      NoGradGuard ng;
      Tensor pre = ops::linear(x, w, b);
      for (double v : pre.to_vector<double>()) near_kink = near_kink || std::abs(v) < 1e-3;
    }
    if (near_kink) continue;
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::linear(v[0], v[1], v[2], true), seed); },
                    {x, w, b});
  }
}

TEST_CASE("relu matches finite differences with inputs away from 0", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor x = rand64({n, c}, g, 0.1, 1.0);
    Tensor sign = randint(0, 2, {n, c}, DType::Int64, &g).to(DType::Float64) * 2.0 - 1.0;
    Tensor xs = (x * sign).detach().contiguous();  // |x| in [0.1, 1], either sign
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::relu(v[0]), seed); }, {xs});
  }
}

TEST_CASE("sum and mean, all and along a dim, match finite differences", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor x = rand64({n, c, 3}, g);
    check_gradients([&](const std::vector<Tensor>& v) { return ops::sum(v[0]); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return ops::mean(v[0]) * 3.0; }, {x});
    for (int dim = 0; dim < 3; ++dim) {
      check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::sum(v[0], dim), seed); }, {x});
      check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::mean(v[0], dim, true), seed); }, {x});
    }
  }
}

TEST_CASE("log_softmax and softmax match finite differences along any dim", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor x = rand64({n, c}, g, -3.0, 3.0);
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::log_softmax(v[0]), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::softmax(v[0]), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::log_softmax(v[0], 0), seed); }, {x});
  }
}

TEST_CASE("softmax_cross_entropy matches finite differences for mean, sum and none", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor logits = rand64({n, c}, g, -4.0, 4.0);
    Tensor targets = randint(0, c, {n}, DType::Int64, &g);
    using ops::Reduction;
    check_gradients([&](const std::vector<Tensor>& v) { return ops::softmax_cross_entropy(v[0], targets); }, {logits});
    check_gradients([&](const std::vector<Tensor>& v) { return ops::softmax_cross_entropy(v[0], targets, Reduction::Sum); },
                    {logits});
    check_gradients(
        [&](const std::vector<Tensor>& v) { return weighted_sum(ops::softmax_cross_entropy(v[0], targets, Reduction::None), seed); },
        {logits});
    // An upstream gradient other than the implicit 1 takes the rescaling path of the fused node,
    // and the Separate mode recomputes softmax in backward: both must agree with the math.
    check_gradients([&](const std::vector<Tensor>& v) { return ops::softmax_cross_entropy(v[0], targets) * 2.5; },
                    {logits});
    for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
      check_gradients(
          [&](const std::vector<Tensor>& v) {
            return ops::softmax_cross_entropy(v[0], targets, r, ops::CrossEntropyGrad::Separate);
          },
          {logits});
    }
  }
}

TEST_CASE("fused and separate cross-entropy gradients agree bit for bit in float64", "[core]") {
  Generator g(7);
  Tensor logits = rand64({13, 9}, g, -4.0, 4.0);
  Tensor targets = randint(0, 9, {13}, DType::Int64, &g);
  Tensor a = logits.detach().requires_grad_(), b = logits.detach().requires_grad_();
  Tensor la = ops::softmax_cross_entropy(a, targets);
  Tensor lb = ops::softmax_cross_entropy(b, targets, ops::Reduction::Mean, ops::CrossEntropyGrad::Separate);
  la.backward();
  lb.backward();
  CHECK(la.item<double>() == lb.item<double>());
  // Same exp(x - m) · (1/s) · scale per element in both paths (identical CPU code order), so equal,
  // not merely close.
  CHECK(a.grad().to_vector<double>() == b.grad().to_vector<double>());
}

TEST_CASE("views (reshape, narrow, split, transpose, expand, cat) match finite differences", "[core][gradcheck]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor x = rand64({n, c}, g);
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0].reshape({c, n}), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0].t(), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0].t().contiguous().reshape({-1}), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0].narrow(1, c / 2, c - c / 2), seed); }, {x});
    check_gradients(
        [&](const std::vector<Tensor>& v) {
          auto parts = v[0].split(2, 0);
          Tensor acc = ops::sum(parts[0]) * 2.0;
          for (size_t i = 1; i < parts.size(); ++i) acc = acc + weighted_sum(parts[i], seed + i);
          return acc;
        },
        {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(v[0].unsqueeze(0).expand({4, n, c}), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::cat({v[0], v[0] * 2.0}, 0), seed); }, {x});
  }
}

TEST_CASE("layer_norm matches finite differences with and without weight and bias", "[core][gradcheck][layer_norm]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, d] = odd_pair(seed);
    Tensor x = rand64({n, 2, d}, g, -2.0, 2.0), w = rand64({d}, g), b = rand64({d}, g);
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::layer_norm(v[0], v[1], v[2]), seed); },
                    {x, w, b});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::layer_norm(v[0]), seed); }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::layer_norm(v[0], v[1]), seed); },
                    {x, w});
    check_gradients(
        [&](const std::vector<Tensor>& v) { return weighted_sum(ops::layer_norm(v[0], Tensor(), v[1], 0.1), seed); },
        {x, b});
  }
}

TEST_CASE("gelu in both forms matches finite differences", "[core][gradcheck][gelu]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [n, c] = odd_pair(seed);
    Tensor x = rand64({n, c}, g, -5.0, 5.0);
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
      check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::gelu(v[0], form), seed); }, {x});
    }
  }
}

TEST_CASE("embedding matches finite differences in the weight with repeated indices", "[core][gradcheck][embedding]") {
  for (int seed = 0; seed < kSeeds; ++seed) {
    Generator g(seed);
    auto [v, d] = odd_pair(seed);
    Tensor w = rand64({v, d}, g);
    // More positions than rows: indices repeat (and with v = 1 every position holds 0).
    Tensor idx = randint(0, v, {3, 5}, DType::Int64, &g);
    check_gradients([&](const std::vector<Tensor>& t) { return weighted_sum(ops::embedding(idx, t[0]), seed); }, {w});
  }
}
