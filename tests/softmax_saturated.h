// Saturated rows for the softmax family's accuracy tests, shared by the CPU test
// (tests/kernels/test_softmax_accuracy.cpp) and the CUDA one (tests/cuda/test_cuda_softmax.cpp):
// the rows, their targets, the tolerances of Note [softmax at the logits' scale]
// (core/ops/softmax.cpp) and a check that reports the element closest to its tolerance.
//
// A saturated row is one whose logits are large: spread over ±80, one at +80 above a floor near
// -80, or all near 1000. No result may carry an error of the logits' size times eps (the error of
// rounding m + log s to float and subtracting it again); what the float32 arithmetic of
// (x - m) - log s and exp(x - m) / s allows is below, up to a number of ulps each backend states
// for its own exp, log and sums.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"

namespace minidl::softmax_saturated {

constexpr double kEps = std::numeric_limits<float>::epsilon();  // 2^-23: one ulp of 1
// Below the smallest normal float32 a value keeps no relative precision (subnormal, or 0 where
// the arithmetic flushes subnormals): errors under it are allowed outright.
constexpr double kTiny = std::numeric_limits<float>::min();

// Tolerances against the exact (float64) value, given `ulps`: what one backend's exp, 1/s, log s,
// products and sum s may add, in eps (each test states its count and why).
struct Tolerances {
  double ulps;

  // p_j = exp(x_j - m) / s. x_j - m is one float subtraction: exact when x_j and m are within a
  // factor 2 (Sterbenz), else rounded by at most half an ulp of |x_j - m| (below_max), which exp
  // turns into as much relative error in p_j: the float32 input's own limit (PyTorch's float32
  // does the same subtraction). The old exp(x - lse) was off by up to half an ulp of lse ≈ m:
  // 32 eps relative at m ≈ 80, 256 to 512 eps at m ≈ 1000.
  double p(double p_ref, double below_max) const { return (ulps + below_max / 2.0) * kEps * p_ref + kTiny; }

  // log p_j = (x_j - m) - log s: half an ulp of |x_j - m|, the ulps of log s and of s (absolute
  // in log s), half an ulp of the result; |x_j - m| and log s are both at most |log p_j|. The
  // old x - lse carried half an ulp of lse: 3.8e-6 at 80, 3.1e-5 near 1000.
  double log_p(double log_p_ref) const { return (2.0 * std::abs(log_p_ref) + ulps) * kEps; }

  // dlogits_j = p_j·scale - [j == t]·scale, scale = 1/N as a float32 (half an ulp off, scaling
  // the whole value): scale·(p's tolerance), half an ulp each for p·scale, the subtraction and
  // scale itself, and the subnormal floor again (p·scale may be subnormal where p is not).
  double grad(double g_ref, double p_ref, double below_max, double scale) const {
    return scale * (p(p_ref, below_max) + kEps * p_ref) + kEps * std::abs(g_ref) + kTiny;
  }
};

enum class Rows { Spread80, OneAt80, Near1000 };
constexpr Rows kAllRows[] = {Rows::Spread80, Rows::OneAt80, Rows::Near1000};

inline const char* rows_name(Rows kind) {
  switch (kind) {
    case Rows::Spread80: return "logits uniform in [-80, 80)";
    case Rows::OneAt80: return "one logit at +80, the others in [-81, -79)";
    case Rows::Near1000: return "logits uniform in [992, 1008)";
  }
  return "";
}

// Float32 CPU logits [rows, cols] of the kind; the hot column of OneAt80 is (5 r + 3) mod cols.
inline Tensor saturated_logits(Rows kind, int64_t rows, int64_t cols, uint64_t seed) {
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

// CPU targets [rows] for logits x [rows, cols]: the row's largest logit on even rows (a
// confident, correct prediction: loss near 0, the case training drives towards), a random class
// on odd rows.
inline Tensor targets_for(const std::vector<double>& x, int64_t rows, int64_t cols, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> t = randint(0, cols, {rows}, DType::Int64, &g).to_vector<int64_t>();
  for (int64_t r = 0; r < rows; r += 2) {
    const auto row = x.begin() + r * cols;
    t[static_cast<size_t>(r)] = std::max_element(row, row + cols) - row;
  }
  return from_vector(t);
}

// m_row - x_j >= 0 for every element of x [rows, cols] (exact: x holds float32 values).
inline std::vector<double> below_row_max(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> d(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = x.begin() + r * cols;
    const double m = *std::max_element(row, row + cols);
    for (int64_t j = 0; j < cols; ++j) d[static_cast<size_t>(r * cols + j)] = m - row[j];
  }
  return d;
}

// got (float32, any device) within tolerance(i) of want (float64, CPU) at every element, and
// finite; reports the element that comes closest to (or exceeds) its tolerance, and the error there.
inline void check_within(const Tensor& got, const Tensor& want, const std::function<double(size_t)>& tolerance,
                         const std::string& what) {
  INFO(what << ", shape " << got.shape());
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == DType::Float32);
  REQUIRE(want.dtype() == DType::Float64);
  const std::vector<float> a = got.to(Device::cpu()).to_vector<float>();
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

}  // namespace minidl::softmax_saturated
