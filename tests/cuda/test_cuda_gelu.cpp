// kernels/cuda/gelu.cu through ops::gelu, both forms, forward and backward, against the CPU in
// float64 from the same float32 inputs: sizes around the block and grid boundaries, inputs over
// [-8, 8] (the negative tail, where the textbook forms cancel: Note [GELU without cancellation]
// in kernels/cpu/gelu.cpp), huge inputs, and a strided input.
#include "cuda_test_util.h"

#include <cmath>
#include <vector>

#include "core/ops/gelu.h"
#include "tests/softmax_saturated.h"

using namespace minidl;
using namespace minidl::cuda_test;
using minidl::softmax_saturated::check_within;

namespace {

constexpr double kU = 0x1p-24;  // float32's unit roundoff
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kKappa = 0.044715;

// Tolerances, term by term, from the float32 error of the device (in units of u = 2^-24):
//   None: z = −x/√2 carries two roundings (the constant and the product), and erfc turns a
//     relative error of z into S(z) = |d log erfc(z)/d log z| = |2z·exp(−z²)/(√π·erfc(z))| times
//     as much of its own (≈ 2z² + 1 for negative x, ≈ 0 for positive x); erfcf is within 4 ulps
//     (8 units, the CUDA math library's bound) and 0.5·x·(...) adds 2: y within (2S + 12)·u·|y|.
//     The slope T1 + T2 = 0.5·erfc(z) + x·φ(x): T1 as y; T2's expf(−x²/2) has an argument
//     carrying x²/2 units, plus 4 for expf and a few for the products: (x²/2 + 8)·u·|T2|.
//   Tanh: u = √(2/π)(x + 0.044715x³) carries up to 7 roundings (x³'s three products, the two
//     constants, a sum, a product; no cancellation, both terms share x's sign), which exp(∓2u)
//     turns into 14|u| units, plus 4 of its own. σ(2u) = 1/(1 + e) takes the share σ(−2u) =
//     e/(1 + e) of e's error, plus 2 for the sum and division: y = x·σ(2u) within
//     (σ(−2u)·(14|u| + 4) + 4)·u·|y|. The slope σ(2u) + T2, T2 = 2x·σ(2u)·σ(−2u)·u': the two
//     σ's errors add up to (14|u| + 4) + 4 (their shares sum to 1), u' and the products ~10:
//     (14|u| + 20)·u·|T2|.
// Backward multiplies by dy (one more rounding of the result). Term by term, not by the sum:
// the slope passes through 0 (near x = -0.75), and a tolerance on the sum would be ~0 there.
struct Tolerance {
  GeluApproximate form;
  double y(double x, double y_ref) const { return factor(x) * kU * std::abs(y_ref) + 1e-38; }
  double dx(double x, double dy, double dx_ref) const {
    double terms;
    if (form == GeluApproximate::None) {
      const double t1 = 0.5 * std::erfc(-x / std::sqrt(2.0));
      const double t2 = x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.141592653589793);
      terms = factor(x) * std::abs(t1) + (0.5 * x * x + 8) * std::abs(t2);
    } else {
      const double u = kSqrt2OverPi * (x + kKappa * x * x * x);
      const double s = 1.0 / (1.0 + std::exp(-2 * u)), s_neg = 1.0 / (1.0 + std::exp(2 * u));
      const double t2 = 2 * x * s * s_neg * kSqrt2OverPi * (1 + 3 * kKappa * x * x);
      terms = factor(x) * std::abs(s) + (14 * std::abs(u) + 20) * std::abs(t2);
    }
    return kU * (terms * std::abs(dy) + std::abs(dx_ref)) + 1e-38;
  }
  // The relative factor of y (and of the slope's first term), in units of u.
  double factor(double x) const {
    if (form == GeluApproximate::None) {
      const double z = -x / std::sqrt(2.0);
      const double S = std::abs(2 * z * std::exp(-z * z) / (std::sqrt(3.141592653589793) * std::erfc(z)));
      return 2 * S + 12;
    }
    const double u = kSqrt2OverPi * (x + kKappa * x * x * x);
    const double s_neg = 1.0 / (1.0 + std::exp(2 * u));
    return s_neg * (14 * std::abs(u) + 4) + 4;
  }
};

void check_gelu(const Tensor& x, const Tensor& dy, GeluApproximate form, const std::string& what) {
  INFO(what << ", approximate = " << gelu_approximate_name(form) << ", shape " << x.shape());
  Tensor x64 = x.to(DType::Float64).requires_grad_();
  const Tensor y64 = ops::gelu(x64, form);
  y64.backward(dy.to(DType::Float64));
  Tensor xg = x.to(kGpu).requires_grad_();
  const Tensor yg = ops::gelu(xg, form);
  yg.backward(dy.to(kGpu));
  const std::vector<double> xv = x.to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> gv = dy.to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> yv = y64.detach().contiguous().to_vector<double>();
  const std::vector<double> dv = x64.grad().contiguous().to_vector<double>();
  const Tolerance tol{form};
  check_within(yg.contiguous(), y64.detach().contiguous(), [&](size_t i) { return tol.y(xv[i], yv[i]); }, "y");
  check_within(xg.grad().contiguous(), x64.grad().contiguous(),
               [&](size_t i) { return tol.dx(xv[i], gv[i], dv[i]); }, "dx");
}

}  // namespace

TEST_CASE("gelu on the device matches the CPU in both forms over [-8, 8] for sizes across block boundaries",
          "[cuda][gelu]") {
  uint64_t seed = 900;
  for (int64_t n : {1, 3, 31, 33, 255, 257, 1023, 1025, 4097, 100003}) {
    const Tensor x = random_cpu({n}, ++seed, -8.0, 8.0);
    const Tensor dy = random_cpu({n}, ++seed);
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh})
      check_gelu(x, dy, form, "n = " + std::to_string(n));
  }
}

TEST_CASE("gelu on the device matches the CPU for huge inputs and a strided input", "[cuda][gelu]") {
  // ±100 and ±1e30 saturate (x² and x³ overflow float32 at 1e30: Note [GELU without cancellation]).
  const Tensor big = from_vector(std::vector<float>{100.0f, -100.0f, 1e30f, -1e30f, 0.0f, -0.0f}, {6}, DType::Float32);
  const Tensor ones_dy = ones({6});
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
    Tensor xg = big.to(kGpu).requires_grad_();
    const Tensor y = ops::gelu(xg, form);
    y.backward(ones_dy.to(kGpu));
    // The limits are exact in float32: gelu(x) = x and slope 1 on the right, 0 and slope 0 on the left.
    CHECK(y.to(Device::cpu()).to_vector<float>() == std::vector<float>{100.0f, 0.0f, 1e30f, 0.0f, 0.0f, 0.0f});
    CHECK(xg.grad().to(Device::cpu()).to_vector<float>() == std::vector<float>{1.0f, 0.0f, 1.0f, 0.0f, 0.5f, 0.5f});
  }
  // A transposed [33, 17] view: the op makes it contiguous first.
  const Tensor x = random_cpu({17, 33}, 990, -4.0, 4.0).t();
  const Tensor dy = random_cpu({33, 17}, 991);
  for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) check_gelu(x, dy, form, "transposed");
}
