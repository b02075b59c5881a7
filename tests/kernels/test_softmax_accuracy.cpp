// The float32 softmax family of the CPU backend (kernels/cpu/softmax.cpp) on saturated rows —
// logits spread over ±80, one logit at +80 above a floor near -80, logits near 1000 — against
// its own float64 path: softmax, log_softmax, the per-row cross-entropy loss and dlogits from
// both gradient paths (fused and separate). Note [softmax at the logits' scale]
// (core/ops/softmax.cpp): no result may carry an error of the logits' size times eps, the error of
// rounding m + log s to float before subtracting it again; the tolerances below are what the
// float32 arithmetic of (x - m) - log s and exp(x - m) / s allows.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "tests/softmax_saturated.h"

using namespace minidl;
using namespace minidl::softmax_saturated;

namespace {

// The CPU's few ulps: exp (<= 1 ulp), 1/s and the product (1/2 ulp each), and the relative error
// of s, which the CPU sums in double: that of its terms, <= 1 ulp. 8 eps is twice that.
constexpr Tolerances kTol{8.0};

}  // namespace

TEST_CASE("float32 softmax and log_softmax of saturated rows match float64 to a few eps", "[kernels][softmax]") {
  uint64_t seed = 100;
  for (Rows kind : kAllRows) {
    for (int64_t cols : {1, 2, 7, 33, 100, 1000, 1027}) {
      const int64_t rows = 37;
      INFO(rows_name(kind) << ", [" << rows << ", " << cols << "]");
      const Tensor x = saturated_logits(kind, rows, cols, ++seed);  // [rows, cols] float32
      const Tensor x64 = x.to(DType::Float64);                        // the same values, a new tensor
      const std::vector<double> below = below_row_max(x64.to_vector<double>(), rows, cols);
      const Tensor p = ops::softmax(x, 1);
      const Tensor p64 = ops::softmax(x64, 1);
      const std::vector<double> p_ref = p64.to_vector<double>();
      check_within(p, p64, [&](size_t i) { return kTol.p(p_ref[i], below[i]); }, "softmax");
      const Tensor y = ops::log_softmax(x, 1);
      const Tensor y64 = ops::log_softmax(x64, 1);
      const std::vector<double> y_ref = y64.to_vector<double>();
      check_within(y, y64, [&](size_t i) { return kTol.log_p(y_ref[i]); }, "log_softmax");
    }
  }
}

TEST_CASE("float32 cross-entropy of saturated rows matches float64: loss and dlogits, fused and separate",
          "[kernels][softmax]") {
  uint64_t seed = 200;
  for (Rows kind : kAllRows) {
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
      check_within(loss, loss64, [&](size_t r) { return kTol.log_p(loss_ref[r]); }, "per-row loss");

      const double scale = 1.0 / static_cast<double>(rows);
      for (ops::CrossEntropyGrad mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
        Tensor xg = x.clone().requires_grad_();
        Tensor mean = ops::softmax_cross_entropy(xg, t, ops::Reduction::Mean, mode);
        mean.backward();
        const Tensor g = xg.grad();
        const char* what = mode == ops::CrossEntropyGrad::Fused ? "fused dlogits" : "separate dlogits";
        check_within(g, g64, [&](size_t i) { return kTol.grad(g_ref[i], p_ref[i], below[i], scale); }, what);
        // The mean of the losses: each within its tolerance, so their mean within the mean
        // tolerance, plus half an ulp for each of the float32 sum's roundings (<= rows of them).
        double mean_tol = 0.0;
        for (int64_t r = 0; r < rows; ++r) mean_tol += kTol.log_p(loss_ref[static_cast<size_t>(r)]) * scale;
        mean_tol += static_cast<double>(rows) * kEps / 2.0 * std::abs(mean64.item());
        check_within(mean, mean64.detach(), [&](size_t) { return mean_tol; }, "mean loss");
      }
    }
  }
}
