// nn::clip_grad_norm_ (nn/clip_grad.*, kernels/cpu/multi_tensor.cpp) against a float64 reference
// written here: norms 2, 1, 3 and inf, a parameter without a gradient, max_norm above and below the
// norm, float32 and float64, and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "nn/nn.h"

using namespace minidl;

namespace {

double reference_norm(const std::vector<std::vector<double>>& grads, double p) {
  double acc = 0.0;
  for (const auto& g : grads)
    for (double v : g) acc = std::isinf(p) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), p);
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

}  // namespace

TEST_CASE("clip_grad_norm_ returns the total norm and scales every gradient by min(max_norm / norm, 1)",
          "[nn][clip_grad]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::Float64, DType::Float32})
    for (double p : {2.0, 1.0, 3.0, inf})
      for (double max_norm_factor : {0.25, 4.0}) {  // below and above the norm
        INFO(dt << ", norm_type " << p << ", max_norm = norm · " << max_norm_factor);
        Generator g(5);
        // Sizes that cross the CPU's chunks of 16384 elements, and one without a gradient.
        std::vector<Tensor> params = {randn({3, 7}, dt, &g), randn({20000}, dt, &g), randn({2}, dt, &g),
                                      randn({40000}, dt, &g), randn({1}, dt, &g)};
        std::vector<std::vector<double>> grads;
        for (size_t i = 0; i < params.size(); ++i) {
          if (i == 2) continue;  // params[2] has no gradient: skipped
          params[i].set_grad(randn(params[i].shape(), dt, &g));
          grads.push_back(params[i].grad().to(DType::Float64).to_vector<double>());
        }
        const double want_norm = reference_norm(grads, p);
        const double max_norm = want_norm * max_norm_factor;
        const Tensor total = nn::clip_grad_norm_(params, max_norm, p);
        CHECK(total.dim() == 0);
        CHECK(total.dtype() == dt);
        // float64: sums in another order of ~60000 terms: 1e-12 relative. float32: the sum is in
        // double, the result rounded to float: 1e-6 relative.
        const double rel = dt == DType::Float64 ? 1e-12 : 1e-6;
        CHECK(total.item() == Approx(want_norm).epsilon(rel));
        const double coef = std::min(max_norm / (want_norm + 1e-6), 1.0);
        size_t k = 0;
        for (size_t i = 0; i < params.size(); ++i) {
          if (i == 2) {
            CHECK_FALSE(params[i].grad().defined());
            continue;
          }
          const std::vector<double> got = params[i].grad().to(DType::Float64).to_vector<double>();
          for (size_t j = 0; j < got.size(); ++j) CHECK(got[j] == Approx(grads[k][j] * coef).epsilon(rel * 4));
          ++k;
        }
      }
}

TEST_CASE("clip_grad_norm_ of parameters without gradients is 0, and bad arguments are refused", "[nn][clip_grad]") {
  const Tensor a = randn({3});
  CHECK(nn::clip_grad_norm_({a}, 1.0).item() == 0.0);
  CHECK(nn::clip_grad_norm_({}, 1.0).item() == 0.0);
  CHECK_THROWS_WITH(nn::clip_grad_norm_({a}, 1.0, 0.0), Catch::Contains("norm_type must be > 0"));
  Tensor b = randn({2}, DType::Float64), c = randn({2}, DType::Float32);
  b.set_grad(ones({2}, DType::Float64));
  c.set_grad(ones({2}, DType::Float32));
  CHECK_THROWS_WITH(nn::clip_grad_norm_({b, c}, 1.0), Catch::Contains("share one device and dtype"));
}

TEST_CASE("clip_grad_norm_ gives the same bits on a second run", "[nn][clip_grad]") {
  Generator g(9);
  Tensor a = randn({100000}, DType::Float32, &g);
  const Tensor grad = randn({100000}, DType::Float32, &g);
  a.set_grad(grad.clone());
  const float first = static_cast<float>(nn::clip_grad_norm_({a}, 1e9).item());
  a.set_grad(grad.clone());
  const float second = static_cast<float>(nn::clip_grad_norm_({a}, 1e9).item());
  CHECK(first == second);
}
