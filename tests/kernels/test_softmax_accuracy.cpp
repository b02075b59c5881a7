// The float32 softmax family of the CPU backend (kernels/cpu/softmax.cpp) on saturated rows —
// logits spread over ±80, one logit at +80 above a floor near -80, logits near 1000 — against
// its own float64 path: softmax, log_softmax, the per-row cross-entropy loss and dlogits from
// both gradient paths (fused and separate). Note [softmax at the logits' scale]
// (core/ops/softmax.cpp): no result may carry an error of the logits' size times eps, the error of
// rounding m + log s to float before subtracting it again; the tolerances below are what the
// float32 arithmetic of (x - m) - log s and exp(x - m) / s allows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"

using namespace minidl;

namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();  // 2^-23: one ulp of 1
// Below the smallest normal float32 a value keeps no relative precision (subnormal, or 0 where
// the arithmetic flushes subnormals): errors under it are allowed outright.
constexpr double kTiny = std::numeric_limits<float>::min();

// Tolerance of p_j = exp(x_j - m) / s (float32) against the exact value. x_j - m is one float
// subtraction: exact when x_j and m are within a factor 2 (Sterbenz), else rounded by at most
// half an ulp of |x_j - m|, i.e. |x_j - m|·eps/2, which exp turns into as much relative error in
// p_j (the input's own limit: PyTorch's float32 does the same subtraction). On top, a few eps:
// exp (<= 1 ulp), 1/s and the product (1/2 ulp each), and the relative error of s, which the
// CPU sums in double: that of its terms, <= 1 ulp. 8 eps is twice that; the old exp(x - lse)
// was off by up to half an ulp of lse ≈ m: 32 eps relative at m ≈ 80, 256 to 512 eps at
// m ≈ 1000.
double p_tolerance(double p_ref, double below_max) { return (8.0 + below_max / 2.0) * kEps * p_ref + kTiny; }

// Tolerance of log p_j = (x_j - m) - log s: half an ulp of |x_j - m| (as above), one ulp of
// log s plus the relative error of s (absolute in log s), half an ulp of the result. Both
// |x_j - m| and log s are at most |log p_j|, so 2 eps·|log p_j| + 8 eps bounds it. The old
// x - lse carried half an ulp of lse: 3.8e-6 at lse ≈ 80, where this allows 1e-6 for
// |log p| <= 0.5.
double log_p_tolerance(double log_p_ref) { return (2.0 * std::abs(log_p_ref) + 8.0) * kEps; }

// Tolerance of dlogits_j = p_j·scale - [j == t]·scale (scale = 1/N in float32, half an ulp off
// 1/N; its error scales the whole value): scale·(p's tolerance), half an ulp each for p·scale
// and the subtraction, and the half ulp of scale, on |dlogits| or p·scale; and the subnormal
// floor again (p·scale may be subnormal where p is not).
double grad_tolerance(double g_ref, double p_ref, double below_max, double scale) {
  return scale * (p_tolerance(p_ref, below_max) + kEps * p_ref) + kEps * std::abs(g_ref) + kTiny;
}

enum class Rows { Spread80, OneAt80, Near1000 };

const char* rows_name(Rows kind) {
  switch (kind) {
    case Rows::Spread80: return "logits uniform in [-80, 80)";
    case Rows::OneAt80: return "one logit at +80, the others in [-81, -79)";
    case Rows::Near1000: return "logits uniform in [992, 1008)";
  }
  return "";
}

// Float32 logits [rows, cols] of the kind; the hot column of OneAt80 is (5 r + 3) mod cols.
Tensor saturated_logits(Rows kind, int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  const Tensor u = rand({rows, cols}, DType::Float32, &g);  // [rows, cols] uniform in [0, 1)
  switch (kind) {
    case Rows::Spread80: return u * 160.0 - 80.0;
    case Rows::Near1000: return u * 16.0 + 992.0;
    case Rows::OneAt80: {
      std::vector<float> v = (u * 2.0 - 81.0).to_vector<float>();
      for (int64_t r = 0; r < rows; ++r) v[static_cast<size_t>(r * cols + (5 * r + 3) % cols)] = 80.0f;
      return from_vector(v, Shape{rows, cols});
    }
  }
  return Tensor();
}

// Targets [rows]: the row's largest logit on even rows (a confident, correct prediction: loss
// near 0, the case training drives towards), a random class on odd rows.
Tensor targets_for(const std::vector<double>& x, int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t = randint(0, cols, {rows}, DType::Int64, &g).to_vector<int64_t>();
  for (int64_t r = 0; r < rows; r += 2) {
    const auto row = x.begin() + r * cols;
    t[static_cast<size_t>(r)] = std::max_element(row, row + cols) - row;
  }
  return from_vector(t);
}

// m_row - x_j >= 0 for every element of x [rows, cols] (exact: x holds float32 values).
std::vector<double> below_row_max(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> d(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = x.begin() + r * cols;
    const double m = *std::max_element(row, row + cols);
    for (int64_t j = 0; j < cols; ++j) d[static_cast<size_t>(r * cols + j)] = m - row[j];
  }
  return d;
}

// Every |got_i - want_i| within tolerance(i); reports the element that comes closest to (or
// exceeds) its tolerance, and the error there.
void check_within(const Tensor& got, const Tensor& want, const std::function<double(size_t)>& tolerance,
                  const std::string& what) {
  INFO(what << ", shape " << got.shape());
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == DType::Float32);
  REQUIRE(want.dtype() == DType::Float64);
  const std::vector<float> a = got.to_vector<float>();
  const std::vector<double> b = want.to_vector<double>();
  size_t worst = 0;
  double worst_ratio = 0.0;
  bool finite = true;
  for (size_t i = 0; i < a.size(); ++i) {
    finite = finite && std::isfinite(a[i]);
    const double ratio = std::abs(static_cast<double>(a[i]) - b[i]) / tolerance(i);
    if (!(ratio <= worst_ratio)) {  // also takes a NaN ratio
      worst_ratio = ratio;
      worst = i;
    }
  }
  INFO("worst element " << worst << ": got " << a[worst] << ", want " << b[worst] << ", error "
                        << std::abs(static_cast<double>(a[worst]) - b[worst]) << " = " << worst_ratio
                        << " x its tolerance " << tolerance(worst));
  CHECK(finite);
  CHECK(worst_ratio <= 1.0);
}

}  // namespace

TEST_CASE("float32 softmax and log_softmax of saturated rows match float64 to a few eps", "[kernels][softmax]") {
  uint64_t seed = 100;
  for (Rows kind : {Rows::Spread80, Rows::OneAt80, Rows::Near1000}) {
    for (int64_t cols : {1, 2, 7, 33, 100, 1000, 1027}) {
      const int64_t rows = 37;
      INFO(rows_name(kind) << ", [" << rows << ", " << cols << "]");
      const Tensor x = saturated_logits(kind, rows, cols, ++seed);  // [rows, cols] float32
      const Tensor x64 = x.to(DType::Float64);                        // the same values, a new tensor
      const std::vector<double> below = below_row_max(x64.to_vector<double>(), rows, cols);
      const Tensor p = ops::softmax(x, 1);
      const Tensor p64 = ops::softmax(x64, 1);
      const std::vector<double> p_ref = p64.to_vector<double>();
      check_within(p, p64, [&](size_t i) { return p_tolerance(p_ref[i], below[i]); }, "softmax");
      const Tensor y = ops::log_softmax(x, 1);
      const Tensor y64 = ops::log_softmax(x64, 1);
      const std::vector<double> y_ref = y64.to_vector<double>();
      check_within(y, y64, [&](size_t i) { return log_p_tolerance(y_ref[i]); }, "log_softmax");
    }
  }
}

TEST_CASE("float32 cross-entropy of saturated rows matches float64: loss and dlogits, fused and separate",
          "[kernels][softmax]") {
  uint64_t seed = 200;
  for (Rows kind : {Rows::Spread80, Rows::OneAt80, Rows::Near1000}) {
    for (int64_t cols : {1, 2, 7, 33, 100, 1000, 1027}) {
      const int64_t rows = 37;
      INFO(rows_name(kind) << ", [" << rows << ", " << cols << "]");
      const Tensor x = saturated_logits(kind, rows, cols, ++seed);  // [rows, cols] float32
      const std::vector<double> xv = x.to(DType::Float64).to_vector<double>();
      const Tensor t = targets_for(xv, rows, cols, ++seed);  // [rows] int64
      const std::vector<double> below = below_row_max(xv, rows, cols);

      // The reference: the float64 path on the same values, per-row losses and the mean's dlogits.
      Tensor x64 = x.to(DType::Float64).requires_grad_();
      const Tensor loss64 = ops::softmax_cross_entropy(x64, t, ops::Reduction::None);
      const std::vector<double> loss_ref = loss64.to_vector<double>();
      Tensor mean64 = ops::softmax_cross_entropy(x64, t, ops::Reduction::Mean);
      mean64.backward();
      const Tensor g64 = x64.grad();
      const std::vector<double> g_ref = g64.to_vector<double>();
      const std::vector<double> p_ref = ops::softmax(x.to(DType::Float64), 1).to_vector<double>();

      // loss = -log p_t: log p's tolerance at the target.
      const Tensor loss = ops::softmax_cross_entropy(x, t, ops::Reduction::None);
      check_within(loss, loss64, [&](size_t r) { return log_p_tolerance(loss_ref[r]); }, "per-row loss");

      const double scale = 1.0 / static_cast<double>(rows);
      for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
        Tensor xg = x.clone().requires_grad_();
        Tensor mean = ops::softmax_cross_entropy(xg, t, ops::Reduction::Mean, mode);
        mean.backward();
        const Tensor g = xg.grad();
        const char* what = mode == ops::CrossEntropyGrad::Fused ? "fused dlogits" : "separate dlogits";
        check_within(g, g64, [&](size_t i) { return grad_tolerance(g_ref[i], p_ref[i], below[i], scale); }, what);
        // The mean of the losses: each within its tolerance, so their mean within the mean
        // tolerance, plus half an ulp for each of the float32 sum's roundings (<= rows of them).
        double mean_tol = 0.0;
        for (int64_t r = 0; r < rows; ++r) mean_tol += log_p_tolerance(loss_ref[static_cast<size_t>(r)]) * scale;
        mean_tol += static_cast<double>(rows) * kEps / 2.0 * std::abs(mean64.item());
        check_within(mean, mean64.detach(), [&](size_t) { return mean_tol; }, "mean loss");
      }
    }
  }
}
