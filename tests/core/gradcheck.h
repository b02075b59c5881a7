// A float64 gradient checker: compares autograd's gradient of a scalar function of several
// tensors against central finite differences, element by element.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

namespace minidl::testing {

using ScalarFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Reduces any output to a scalar with fixed random weights, so every output element's
// gradient is exercised (sum() alone would hide errors that cancel).
inline Tensor weighted_sum(const Tensor& y, uint64_t seed) {
  Generator g(seed ^ 0x5eedULL);
  Tensor w = randn(y.shape(), TensorOptions(y.dtype(), y.device()), &g);
  return ops::sum(y * w);
}

// Tolerance: central differences with h = 1e-6 in float64 have truncation error O(h²·f''')
// ≈ 1e-12 and rounding error ≈ 1e-16/h = 1e-10 per evaluation; 1e-6 absolute + relative
// leaves a wide margin while still catching any real mistake (those are O(1)).
inline void check_gradients(const ScalarFn& f, std::vector<Tensor> inputs, double tol = 1e-6) {
  for (auto& t : inputs) {
    t.requires_grad_(true);
    t.set_grad(Tensor());  // inputs are reused across checks: start each from no gradient
  }
  Tensor out = f(inputs);
  REQUIRE(out.numel() == 1);
  out.backward();
  const double h = 1e-6;
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    REQUIRE(x.dtype() == DType::Float64);
    REQUIRE(x.is_contiguous());
    Tensor analytic = x.grad();
    REQUIRE(analytic.defined());
    double* p = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = p[j];
      p[j] = saved + h;
      const double up = f(inputs).item();
      p[j] = saved - h;
      const double down = f(inputs).item();
      p[j] = saved;
      const double numeric = (up - down) / (2 * h);
      const double got = analytic.reshape(Shape{x.numel()}).at({j});
      INFO("input " << i << " element " << j << ": analytic " << got << ", numeric " << numeric);
      CHECK(std::abs(got - numeric) <= tol * (1.0 + std::abs(numeric)));
    }
  }
}

inline Tensor rand64(const Shape& s, Generator& g, double lo = -1.0, double hi = 1.0) {
  return uniform(s, lo, hi, DType::Float64, &g);
}

}  // namespace minidl::testing
