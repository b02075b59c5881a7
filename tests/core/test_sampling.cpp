// ops::topk and ops::multinomial (core/ops/sampling.*, kernels/cpu/sampling.cpp): order, ties and
// NaN, other dims, the errors; multinomial's frequencies over 20000 draws, without replacement's
// distinct draws and second-draw law, determinism for one seed, and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

using namespace minidl;

TEST_CASE("topk returns the k best values and their indices, best first, ties by lower index, NaN largest",
          "[core][topk]") {
  const double nan = std::nan("");
  const Tensor x = from_vector<double>({3, 1, nan, 3, -2, 5, 1}, Shape{7});
  auto [v, i] = ops::topk(x, 4);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 5, 0, 3});
  const std::vector<double> vv = v.to_vector<double>();
  CHECK(std::isnan(vv[0]));
  CHECK(std::vector<double>(vv.begin() + 1, vv.end()) == std::vector<double>{5, 3, 3});
  auto [vs, is] = ops::topk(x, 3, -1, /*largest=*/false);
  CHECK(is.to_vector<int64_t>() == std::vector<int64_t>{4, 1, 6});
  CHECK(vs.to_vector<double>() == std::vector<double>{-2, 1, 1});
  auto [v0, i0] = ops::topk(x, 0);
  CHECK(v0.numel() == 0);
  CHECK(i0.dtype() == DType::Int64);
}

TEST_CASE("topk matches a full sort of each row, along the last and the first dim", "[core][topk]") {
  Generator g(3);
  // Rounded to tenths so that ties occur.
  const Tensor x = from_vector<float>([&] {
    std::vector<float> v = (randn({9, 31}, DType::Float32, &g) * 10.0).to_vector<float>();
    for (float& e : v) e = std::round(e);
    return v;
  }(), Shape{9, 31});
  const std::vector<float> xv = x.to_vector<float>();
  for (bool largest : {true, false}) {
    auto [v, i] = ops::topk(x, 6, 1, largest);
    REQUIRE(v.shape() == Shape{9, 6});
    const std::vector<float> vv = v.to_vector<float>();
    const std::vector<int64_t> iv = i.to_vector<int64_t>();
    for (int64_t r = 0; r < 9; ++r) {
      std::vector<int64_t> order(31);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return largest ? xv[r * 31 + a] > xv[r * 31 + b] : xv[r * 31 + a] < xv[r * 31 + b];
      });
      for (int64_t q = 0; q < 6; ++q) {
        CHECK(iv[r * 6 + q] == order[q]);
        CHECK(vv[r * 6 + q] == xv[r * 31 + order[q]]);
      }
    }
    // Along dim 0: the same as topk of the transpose, transposed back.
    auto [v0, i0] = ops::topk(x, 4, 0, largest);
    REQUIRE(v0.shape() == Shape{4, 31});
    auto [vt, it] = ops::topk(ops::transpose(x, 0, 1).contiguous(), 4, 1, largest);
    CHECK(v0.to_vector<float>() == ops::transpose(vt, 0, 1).contiguous().to_vector<float>());
    CHECK(i0.to_vector<int64_t>() == ops::transpose(it, 0, 1).contiguous().to_vector<int64_t>());
  }
}

TEST_CASE("topk refuses k beyond the dim and inputs that need a gradient", "[core][topk]") {
  Tensor x = randn({2, 5});
  CHECK_THROWS_WITH(ops::topk(x, 6), Catch::Contains("k = 6 must lie in [0, 5]"));
  CHECK_THROWS_WITH(ops::topk(x, -1), Catch::Contains("k = -1"));
  CHECK_THROWS_WITH(ops::topk(x, 1, 2), Catch::Contains("topk"));
  x.requires_grad_(true);
  CHECK_THROWS_WITH(ops::topk(x, 2), Catch::Contains("not differentiable"));
  NoGradGuard no_grad;
  CHECK_NOTHROW(ops::topk(x, 2));
}

TEST_CASE("multinomial with replacement draws each category at its weight's share of 20000 draws",
          "[core][multinomial]") {
  // Unnormalised weights 1:2:0:3:4 -> p = .1, .2, 0, .3, .4.
  const Tensor w = from_vector<float>({1, 2, 0, 3, 4});
  Generator g(123);
  const int64_t draws = 20000;
  const Tensor s = ops::multinomial(w, draws, /*replacement=*/true, &g);
  REQUIRE(s.shape() == Shape{draws});
  std::vector<int64_t> count(5, 0);
  for (int64_t v : s.to_vector<int64_t>()) ++count[static_cast<size_t>(v)];
  const std::vector<double> p = {0.1, 0.2, 0.0, 0.3, 0.4};
  for (size_t j = 0; j < 5; ++j) {
    // A count is Binomial(20000, p): standard deviation sqrt(N p (1 - p)) <= 71. Five of them
    // bound a correct sampler's miss with probability < 6e-7 per category, while a sampler off
    // by 0.02 in a probability (400 draws) fails.
    const double sd = std::sqrt(static_cast<double>(draws) * p[j] * (1 - p[j]));
    INFO("category " << j << ": " << count[j] << " draws");
    CHECK(std::abs(static_cast<double>(count[j]) - draws * p[j]) <= 5 * sd);
  }
  CHECK(count[2] == 0);  // weight 0 is never drawn
}

TEST_CASE("multinomial without replacement draws distinct categories with the sequential law",
          "[core][multinomial]") {
  const int64_t rows = 20000;
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> w;
  for (int64_t r = 0; r < rows; ++r)
    for (double v : p) w.push_back(static_cast<float>(v * 10));  // unnormalised
  Generator g(77);
  const Tensor s = ops::multinomial(from_vector<float>(w, Shape{rows, 4}), 2, false, &g);
  REQUIRE(s.shape() == Shape{rows, 2});
  const std::vector<int64_t> sv = s.to_vector<int64_t>();
  std::vector<int64_t> first(4, 0), second(4, 0);
  for (int64_t r = 0; r < rows; ++r) {
    REQUIRE(sv[2 * r] != sv[2 * r + 1]);
    ++first[static_cast<size_t>(sv[2 * r])];
    ++second[static_cast<size_t>(sv[2 * r + 1])];
  }
  for (size_t j = 0; j < 4; ++j) {
    // The second draw's law: Σ_i p_i · p_j / (1 - p_i) over i != j. Both counts are binomial: the
    // bound is 5 standard deviations, as above.
    double q = 0;
    for (size_t i = 0; i < 4; ++i)
      if (i != j) q += p[i] * p[j] / (1 - p[i]);
    INFO("category " << j);
    CHECK(std::abs(first[j] - rows * p[j]) <= 5 * std::sqrt(rows * p[j] * (1 - p[j])));
    CHECK(std::abs(second[j] - rows * q) <= 5 * std::sqrt(rows * q * (1 - q)));
  }
  // All V draws without replacement: a permutation of the categories with positive weight.
  const Tensor perm = ops::multinomial(from_vector<double>({0.5, 1, 2, 0.25, 3}), 5, false, &g);
  std::vector<int64_t> pv = perm.to_vector<int64_t>();
  CHECK(std::set<int64_t>(pv.begin(), pv.end()).size() == 5);
}

TEST_CASE("multinomial gives the same samples for the same generator state", "[core][multinomial]") {
  Generator g(5);
  const Tensor w = rand({3, 1000}, DType::Float32, &g);
  Generator a(99), b(99);
  const Tensor first = ops::multinomial(w, 50, true, &a);
  const Tensor second = ops::multinomial(w, 50, true, &b);
  CHECK(first.to_vector<int64_t>() == second.to_vector<int64_t>());
  const Tensor third = ops::multinomial(w, 50, true, &a);  // the generator moved on
  CHECK(first.to_vector<int64_t>() != third.to_vector<int64_t>());
}

TEST_CASE("multinomial refuses negative, non-finite and all-zero rows and too many draws without replacement",
          "[core][multinomial]") {
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, -1}), 1), Catch::Contains("negative"));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, INFINITY}), 1), Catch::Contains("infinite or NaN"));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, NAN}), 1), Catch::Contains("infinite or NaN"));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, 1, 0, 0}, Shape{2, 2}), 1), Catch::Contains("row 1") && Catch::Contains("sums to 0"));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, 2}), 3), Catch::Contains("cannot draw 3 samples from 2"));
  CHECK_NOTHROW(ops::multinomial(from_vector<float>({1, 2}), 3, true));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, 0, 2}), 3), Catch::Contains("fewer positive weights"));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<float>({1, 2}), 0, true), Catch::Contains("num_samples must be at least 1"));
  CHECK_THROWS_WITH(ops::multinomial(from_vector<int64_t>({1, 2}), 1), Catch::Contains("must be a floating dtype"));
}
