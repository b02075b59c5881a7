// ops::softmax_cross_entropy with CrossEntropyOptions (core/ops/softmax.*, kernels/cpu/softmax.cpp):
// ignore_index and label smoothing against a float64 reference written here with plain loops, for
// every reduction and both gradient paths; fp64 gradcheck; the all-ignored mean; the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "gradcheck.h"
#include "nn/nn.h"

using namespace minidl;

namespace {

struct Expected {
  std::vector<double> losses;  // per row
  std::vector<double> grad;    // d(reduced loss)/dlogits, [N, C]
  double reduced;
};

// PyTorch's definition: q = (1 - ε)·onehot(t) + ε/C, loss_r = -Σ_j q_j log p_j, 0 for ignored rows;
// the mean divides by the rows not ignored.
Expected reference(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t n, int64_t c,
                   ops::Reduction reduction, const ops::CrossEntropyOptions& o) {
  Expected e{std::vector<double>(static_cast<size_t>(n), 0.0), std::vector<double>(static_cast<size_t>(n * c), 0.0), 0.0};
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) count += t[static_cast<size_t>(r)] != o.ignore_index;
  const double eps = o.label_smoothing;
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t tr = t[static_cast<size_t>(r)];
    if (tr == o.ignore_index) continue;
    double s = 0.0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[static_cast<size_t>(r * c + j)]);
    const double lse = std::log(s);
    double loss = 0.0;
    const double scale = reduction == ops::Reduction::Mean ? 1.0 / static_cast<double>(count) : 1.0;
    for (int64_t j = 0; j < c; ++j) {
      const double q = (j == tr ? 1.0 - eps : 0.0) + eps / static_cast<double>(c);
      const double logp = x[static_cast<size_t>(r * c + j)] - lse;
      loss -= q * logp;
      e.grad[static_cast<size_t>(r * c + j)] = (std::exp(logp) - q) * scale;
    }
    e.losses[static_cast<size_t>(r)] = loss;
    total += loss;
  }
  e.reduced = reduction == ops::Reduction::Mean ? total / static_cast<double>(count) : total;
  return e;
}

const char* name_of(ops::Reduction r) {
  return r == ops::Reduction::Mean ? "mean" : r == ops::Reduction::Sum ? "sum" : "none";
}

}  // namespace

TEST_CASE("cross-entropy with ignore_index and label smoothing matches the reference for every reduction",
          "[core][cross_entropy]") {
  const int64_t n = 7, c = 5;
  Generator g(41);
  const Tensor x64 = randn({n, c}, DType::Float64, &g) * 2.0;
  const std::vector<double> xv = x64.to_vector<double>();
  // Rows 1 and 4 ignored by the default -100; with ignore_index 2 the rows whose target is 2.
  const std::vector<int64_t> tv = {0, -100, 2, 4, -100, 2, 1};
  const std::vector<int64_t> tv_in_range = {0, 3, 2, 4, 1, 2, 1};
  for (double eps : {0.0, 0.1, 1.0})
    for (int64_t ignore : {int64_t{-100}, int64_t{2}})
      for (auto reduction : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None})
        for (auto mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate})
          for (DType dt : {DType::Float64, DType::Float32}) {
            const std::vector<int64_t>& targets = ignore == -100 ? tv : tv_in_range;
            const ops::CrossEntropyOptions o{ignore, eps};
            INFO("eps " << eps << ", ignore_index " << ignore << ", " << name_of(reduction) << ", "
                        << (mode == ops::CrossEntropyGrad::Fused ? "fused" : "separate") << ", " << dt);
            const Expected want = reference(xv, targets, n, c, reduction, o);
            Tensor logits = x64.to(dt).clone();
            logits.requires_grad_(true);
            Tensor loss = ops::softmax_cross_entropy(logits, from_vector<int64_t>(targets), reduction, mode, o);
            // float64: the kernel sums in another order, O(1) values: 1e-12. float32: a few ulps of
            // the O(10) log-sum-exp and of p: 1e-5.
            const double tol = dt == DType::Float64 ? 1e-12 : 1e-5;
            if (reduction == ops::Reduction::None) {
              const std::vector<double> got = loss.to(DType::Float64).to_vector<double>();
              for (int64_t r = 0; r < n; ++r) CHECK(got[static_cast<size_t>(r)] == Approx(want.losses[static_cast<size_t>(r)]).margin(tol));
              loss.backward(ones({n}, dt));
            } else {
              CHECK(loss.to(DType::Float64).item() == Approx(want.reduced).margin(tol));
              loss.backward();
            }
            const std::vector<double> grad = logits.grad().to(DType::Float64).to_vector<double>();
            for (size_t i = 0; i < grad.size(); ++i) {
              INFO("element " << i);
              CHECK(grad[i] == Approx(want.grad[i]).margin(tol));
            }
            // Ignored rows: exactly 0 loss and 0 gradient.
            for (int64_t r = 0; r < n; ++r)
              if (targets[static_cast<size_t>(r)] == ignore)
                for (int64_t j = 0; j < c; ++j) CHECK(grad[static_cast<size_t>(r * c + j)] == 0.0);
          }
}

TEST_CASE("cross-entropy with ignored rows and label smoothing passes fp64 gradcheck on both gradient paths",
          "[core][cross_entropy][gradcheck]") {
  Generator g(7);
  const Tensor targets = from_vector<int64_t>({3, -100, 0, 5, 2, -100});
  for (auto mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate})
    for (auto reduction : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None})
      for (double eps : {0.0, 0.3}) {
        INFO(name_of(reduction) << ", eps " << eps);
        const ops::CrossEntropyOptions o{-100, eps};
        testing::check_gradients(
            [&](const std::vector<Tensor>& in) {
              return testing::weighted_sum(ops::softmax_cross_entropy(in[0], targets, reduction, mode, o), 3);
            },
            {randn({6, 6}, DType::Float64, &g)});
      }
}

TEST_CASE("cross-entropy whose every target is ignored gives a NaN mean, a zero sum and zero gradients",
          "[core][cross_entropy]") {
  const Tensor targets = from_vector<int64_t>({-100, -100, -100});
  for (auto mode : {ops::CrossEntropyGrad::Fused, ops::CrossEntropyGrad::Separate}) {
    Tensor logits = randn({3, 4}, DType::Float64);
    logits.requires_grad_(true);
    Tensor mean = ops::softmax_cross_entropy(logits, targets, ops::Reduction::Mean, mode);
    CHECK(std::isnan(mean.item()));
    mean.backward();
    for (double v : logits.grad().to_vector<double>()) CHECK(v == 0.0);
    CHECK(ops::softmax_cross_entropy(logits, targets, ops::Reduction::Sum, mode).item() == 0.0);
  }
}

TEST_CASE("cross-entropy accepts ignore_index outside the classes and rejects other bad targets and smoothing",
          "[core][cross_entropy]") {
  const Tensor logits = randn({2, 3}, DType::Float64);
  CHECK_NOTHROW(ops::softmax_cross_entropy(logits, from_vector<int64_t>({-100, 1})));
  CHECK_NOTHROW(ops::softmax_cross_entropy(logits, from_vector<int64_t>({7, 1}), ops::Reduction::Mean,
                                           ops::CrossEntropyGrad::Fused, {7, 0.0}));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({-1, 1})),
                    Catch::Contains("target -1 at row 0 is out of range [0, 3)") && Catch::Contains("ignore_index -100"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({0, 3})), Catch::Contains("row 1"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({0, 1}), ops::Reduction::Mean,
                                               ops::CrossEntropyGrad::Fused, {-100, -0.1}),
                    Catch::Contains("label_smoothing must lie in [0, 1]"));
  CHECK_THROWS_WITH(ops::softmax_cross_entropy(logits, from_vector<int64_t>({0, 1}), ops::Reduction::Mean,
                                               ops::CrossEntropyGrad::Fused, {-100, 1.5}),
                    Catch::Contains("got 1.5"));
}

TEST_CASE("nn::CrossEntropyLoss forwards its options to the op", "[nn][cross_entropy]") {
  const Tensor logits = randn({4, 3}, DType::Float64);
  const Tensor targets = from_vector<int64_t>({0, 1, -1, 2});
  const ops::CrossEntropyOptions o{-1, 0.25};
  const nn::CrossEntropyLoss loss(ops::Reduction::Sum, o);
  CHECK(loss.options().ignore_index == -1);
  const double got = loss(logits, targets).item();
  const double want = ops::softmax_cross_entropy(logits, targets, ops::Reduction::Sum, ops::CrossEntropyGrad::Fused, o).item();
  CHECK(got == want);
}
