// gelu (core/ops/gelu): both forms against PyTorch's formulas computed here in long double
// (the textbook 1 + erf and 1 + tanh forms, which long double evaluates with digits to spare
// for |x| <= 5), known values of x·Φ(x), relative accuracy in the negative tail where those
// forms cancel in float32 (Note [GELU without cancellation], kernels/cpu/gelu.cpp), no NaN
// for huge |x|, the default form, the form names, and the errors. Finite differences:
// tests/core/test_gradcheck_ops.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/ops/gelu.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

namespace {

constexpr long double kSqrt2OverPi = 0.797884560802865355879892119868763737L;
constexpr long double kKappa = 0.044715L;

// PyTorch's formulas, as its documentation writes them.
long double gelu_textbook(long double x, GeluApproximate form) {
  if (form == GeluApproximate::None) return 0.5L * x * (1.0L + std::erf(x / std::sqrt(2.0L)));
  return 0.5L * x * (1.0L + std::tanh(kSqrt2OverPi * (x + kKappa * x * x * x)));
}

long double gelu_derivative_textbook(long double x, GeluApproximate form) {
  if (form == GeluApproximate::None) {
    const long double pi = 3.141592653589793238462643383279502884L;
    return 0.5L * (1.0L + std::erf(x / std::sqrt(2.0L))) + x * std::exp(-0.5L * x * x) / std::sqrt(2.0L * pi);
  }
  const long double t = std::tanh(kSqrt2OverPi * (x + kKappa * x * x * x));
  return 0.5L * (1.0L + t) + 0.5L * x * (1.0L - t * t) * kSqrt2OverPi * (1.0L + 3.0L * kKappa * x * x);
}

std::vector<double> grid(double lo, double hi, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * i / (n - 1));
  return v;
}

}  // namespace

TEST_CASE("gelu none is x times the normal CDF at known points", "[core][gelu]") {
  // x·Φ(x) with Φ(1) = 0.841344746068542949, Φ(-1) = 0.158655253931457051, Φ(2) = 0.977249868051820793,
  // Φ(-3) = 0.00134989803163009453 (tables of the normal distribution).
  const std::vector<double> x = {1.0, -1.0, 2.0, -3.0, 0.0};
  const std::vector<double> want = {0.841344746068542949, -0.158655253931457051, 1.954499736103641586,
                                    -0.00404969409489028359, 0.0};
  const std::vector<double> got =
      ops::gelu(from_vector(x, {5}, DType::Float64)).to_vector<double>();
  // float64: z = x/√2 carries two roundings (the constant and the product), and erfc turns a
  // relative error of z into (2z² + 1) times as much of its own (d log erfc(z)/d log z ≈ -2z² - 1
  // for large z): 2x² + 2 units; erfc and the two products add a few: (2x² + 8)·2^-53 relative.
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    CHECK(std::abs(got[i] - want[i]) <= (2 * x[i] * x[i] + 8.0) * std::ldexp(1.0, -53) * std::abs(want[i]));
  }
}

TEST_CASE("gelu forward and backward in both forms match PyTorch's formulas in long double", "[core][gelu]") {
  const std::vector<double> xs = grid(-5.0, 5.0, 201);
  const Tensor x = from_vector(xs, {static_cast<int64_t>(xs.size())}, DType::Float64);
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
    INFO("approximate = " << gelu_approximate_name(form));
    Tensor xr = x.clone().requires_grad_();
    const Tensor y = ops::gelu(xr, form);
    y.sum().backward();
    const std::vector<double> yv = y.to_vector<double>(), dv = xr.grad().to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const long double want = gelu_textbook(xs[i], form), dwant = gelu_derivative_textbook(xs[i], form);
      INFO("x = " << xs[i]);
      // float64, a dozen operations; the derivative passes through 0 near x = -0.75, so its
      // tolerance has an absolute part at the scale of its terms (~1).
      CHECK(std::abs(yv[i] - static_cast<double>(want)) <= 1e-15 * (1.0 + std::abs(static_cast<double>(want))));
      CHECK(std::abs(dv[i] - static_cast<double>(dwant)) <= 1e-15 * (1.0 + std::abs(static_cast<double>(dwant))) * 4);
    }
  }
}

TEST_CASE("gelu keeps its relative accuracy in float32 in the negative tail", "[core][gelu]") {
  // Note [GELU without cancellation]: 1 + erf(x/√2) and 1 + tanh(u) cancel for negative x, so
  // PyTorch's textbook expressions in float32 leave no correct digit at x = -8 (1 + tanh u is
  // 0 there, and 1 + erf keeps none of its digits); minidl's erfc and σ forms keep a few ulps.
  // The references: x·Φ(x) through erfc in long double; x·e^(2u)/(1 + e^(2u)), which is
  // 0.5·x·(1 + tanh u), in long double.
  const std::vector<float> xs = {-3.0f, -5.0f, -6.5f, -8.0f, -10.0f};
  const Tensor x = from_vector(xs, {5}, DType::Float32);
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
    INFO("approximate = " << gelu_approximate_name(form));
    const std::vector<float> y = ops::gelu(x, form).to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const long double v = xs[i];
      long double want, tol;
      if (form == GeluApproximate::None) {
        want = 0.5L * v * std::erfc(-v / std::sqrt(2.0L));
        // z = x/√2 carries two roundings, which erfc turns into (2z² + 1) times as much of its
        // own relative error (2x² + 2 units); erfcf and the products add a few: (2x² + 8)·2^-24.
        tol = (2.0L * v * v + 8.0L) * std::ldexp(1.0L, -24) * std::abs(want);
      } else {
        const long double u = kSqrt2OverPi * (v + kKappa * v * v * v);
        want = v * std::exp(2.0L * u) / (1.0L + std::exp(2.0L * u));
        // u carries up to 7 roundings (x³'s three products, the constants 0.044715 and √(2/π),
        // a sum, a product), which exp turns into 14|u| units of e^(-2u), plus exp's own few;
        // 1 + e, the division add two: (14|u| + 8)·2^-24 relative.
        tol = (14.0L * std::abs(u) + 8.0L) * std::ldexp(1.0L, -24) * std::abs(want);
      }
      INFO("x = " << xs[i] << ": got " << y[i] << ", want " << static_cast<double>(want));
      CHECK(y[i] < 0.0f);
      CHECK(std::abs(y[i] - want) <= tol);
    }
  }
}

TEST_CASE("gelu none in float32 is within a few ulps of x·Φ(x) and its slope on a dense grid", "[core][gelu]") {
  // The float path computes erfc and exp with kernels/cpu/fast_math.h's branch-free polynomials
  // (not libm), so it is checked here on every x of a fine grid over [-12, 12], against erfc
  // in long double at the float input. Tolerances, relative: z = x/√2 carries two roundings
  // (the constant 1/√2 and the product), which erfc turns into (2z² + 1) times as much of its
  // own relative error, 2x² + 2 units; the polynomial, exp and the products add a few:
  // (2x² + 8)·2^-24 for y. The slope 0.5·erfc(−z) + x·φ(x) also passes
  // through 0 (near x = −0.75) and sums terms of size ~1, so its tolerance is absolute at that
  // scale plus the same relative part: (2x² + 8)·2^-24·(|want| + |x·φ(x)|).
  std::vector<float> xs;
  for (int i = 0; i <= 4800; ++i) xs.push_back(-12.0f + 24.0f * static_cast<float>(i) / 4800.0f);
  Tensor x = from_vector(xs, {static_cast<int64_t>(xs.size())}, DType::Float32).requires_grad_();
  const Tensor y = ops::gelu(x);
  y.sum().backward();
  const std::vector<float> yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  const long double pi = 3.141592653589793238462643383279502884L;
  int bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const long double v = xs[i];
    const long double want = 0.5L * v * std::erfc(-v / std::sqrt(2.0L));
    const long double phi_term = v * std::exp(-0.5L * v * v) / std::sqrt(2.0L * pi);
    const long double dwant = 0.5L * std::erfc(-v / std::sqrt(2.0L)) + phi_term;
    const long double units = (2.0L * v * v + 8.0L) * std::ldexp(1.0L, -24);
    const bool y_ok = std::abs(yv[i] - want) <= units * std::abs(want);
    const bool d_ok = std::abs(gv[i] - dwant) <= units * (std::abs(dwant) + std::abs(phi_term));
    if ((!y_ok || !d_ok) && ++bad <= 5) {
      INFO("x = " << xs[i] << ": y " << yv[i] << " want " << static_cast<double>(want) << ", dy/dx " << gv[i]
                  << " want " << static_cast<double>(dwant));
      CHECK(y_ok);
      CHECK(d_ok);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("gelu and its gradient stay finite for huge inputs in both forms and dtypes", "[core][gelu]") {
  // x³ and x² overflow float32 at 1e30; erfc, exp and σ saturate to the limits x and 0 with
  // slopes 1 and 0 (no 0·inf).
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
      INFO(dtype << ", approximate = " << gelu_approximate_name(form));
      const std::vector<double> xs = {100.0, -100.0, 1e30, -1e30};
      Tensor x = from_vector(xs, {4}, dtype).requires_grad_();
      const Tensor y = ops::gelu(x, form);
      y.sum().backward();
      const std::vector<double> yv = y.to(DType::Float64).to_vector<double>();
      const std::vector<double> gv = x.grad().to(DType::Float64).to_vector<double>();
      const double big = dtype == DType::Float32 ? static_cast<double>(1e30f) : 1e30;
      CHECK(yv == std::vector<double>{100.0, 0.0, big, 0.0});
      CHECK(gv == std::vector<double>{1.0, 0.0, 1.0, 0.0});
    }
  }
}

TEST_CASE("gelu defaults to the exact form, names its forms as PyTorch does, and rejects integer input",
          "[core][gelu][errors]") {
  Generator g(21);
  const Tensor x = uniform({17}, -3.0, 3.0, DType::Float64, &g);
  CHECK(ops::gelu(x).to_vector<double>() == ops::gelu(x, GeluApproximate::None).to_vector<double>());
  CHECK(ops::gelu(x).to_vector<double>() != ops::gelu(x, GeluApproximate::Tanh).to_vector<double>());
  CHECK(ops::gelu(zeros({2, 0, 3}, DType::Float64)).shape() == Shape{2, 0, 3});
  CHECK(std::string(gelu_approximate_name(GeluApproximate::None)) == "none");
  CHECK(std::string(gelu_approximate_name(GeluApproximate::Tanh)) == "tanh");
  CHECK(gelu_approximate_from_name("tanh") == GeluApproximate::Tanh);
  CHECK(gelu_approximate_from_name("none") == GeluApproximate::None);
  CHECK_THAT(error_message([] { gelu_approximate_from_name("fast"); }),
             Catch::Contains("'none' or 'tanh'") && Catch::Contains("'fast'"));
  CHECK_THAT(error_message([] { ops::gelu(zeros({3, 2}, DType::Int64)); }),
             Catch::Contains("gelu") && Catch::Contains("int64") && Catch::Contains("[3, 2]"));
}
