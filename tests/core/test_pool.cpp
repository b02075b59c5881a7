// max_pool2d, avg_pool2d and adaptive_avg_pool2d (core/ops/pool): values against loops
// written here, ties and saved indices, finite differences in float64 over odd geometries,
// and the errors for bad arguments.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>

#include "core/ops/pool.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::error_message;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

namespace {

struct PoolCase {
  int64_t n, c, h, w;
  Size2 kernel, stride, padding;
};

const PoolCase kPoolCases[] = {
    {2, 3, 6, 6, {2, 2}, {2, 2}, {0, 0}},  // the CNN's pool (the 2x2 fast path)
    {1, 2, 7, 5, {2, 2}, {2, 2}, {0, 0}},  // the fast path on sizes it does not divide: the last row and column drop
    {1, 2, 7, 5, {3, 3}, {2, 2}, {1, 1}},  // overlapping windows, padding 1, sizes stride 2 does not divide, batch 1
    {2, 1, 5, 8, {2, 3}, {1, 2}, {1, 1}},  // non-square kernel and stride
    {1, 2, 4, 4, {4, 4}, {4, 4}, {0, 0}},  // one window over the whole plane
};

// PyTorch's definitions, written out: the window clipped to the input; max ignores padding;
// avg divides by the window clipped to the padded input (count_include_pad) or to the input.
std::vector<double> reference_pool(const PoolCase& k, const std::vector<double>& x, bool max, bool include_pad,
                                   int64_t& h_out, int64_t& w_out) {
  h_out = (k.h + 2 * k.padding[0] - k.kernel[0]) / k.stride[0] + 1;
  w_out = (k.w + 2 * k.padding[1] - k.kernel[1]) / k.stride[1] + 1;
  std::vector<double> y;
  for (int64_t p = 0; p < k.n * k.c; ++p)
    for (int64_t oh = 0; oh < h_out; ++oh)
      for (int64_t ow = 0; ow < w_out; ++ow) {
        double best = -1e300, sum = 0;
        int64_t covered = 0, padded = 0;
        for (int64_t i = 0; i < k.kernel[0]; ++i)
          for (int64_t j = 0; j < k.kernel[1]; ++j) {
            const int64_t ih = oh * k.stride[0] - k.padding[0] + i, iw = ow * k.stride[1] - k.padding[1] + j;
            if (ih < k.h + k.padding[0] && iw < k.w + k.padding[1]) ++padded;
            if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
            const double v = x[static_cast<size_t>((p * k.h + ih) * k.w + iw)];
            best = std::max(best, v);
            sum += v;
            ++covered;
          }
        y.push_back(max ? best : sum / static_cast<double>(include_pad ? padded : covered));
      }
  return y;
}

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match loops written from PyTorch's definitions", "[core][pool]") {
  int seed = 0;
  for (const PoolCase& k : kPoolCases) {
    Generator g(++seed);
    Tensor x = rand64({k.n, k.c, k.h, k.w}, g);
    int64_t h_out = 0, w_out = 0;
    INFO("case " << seed);
    const auto want_max = reference_pool(k, x.to_vector<double>(), true, true, h_out, w_out);
    const Tensor ymax = ops::max_pool2d(x, k.kernel, k.stride, k.padding);
    REQUIRE(ymax.shape() == Shape{k.n, k.c, h_out, w_out});
    CHECK(ymax.to_vector<double>() == want_max);  // a max is exact
    for (bool include_pad : {true, false}) {
      const auto want = reference_pool(k, x.to_vector<double>(), false, include_pad, h_out, w_out);
      const auto got = ops::avg_pool2d(x, k.kernel, k.stride, k.padding, include_pad).to_vector<double>();
      REQUIRE(got.size() == want.size());
      // at most 16 float64 terms summed in the same order, one division: equal to 1e-15
      for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-14);
    }
  }
}

TEST_CASE("max_pool2d sends the gradient to the first maximum on ties, as PyTorch", "[core][pool]") {
  // One 2x2 window holding 5, 5, 5, 1: the first 5 (row-major) takes the whole gradient.
  Tensor x = from_vector<double>({5, 5, 5, 1}, Shape{1, 1, 2, 2}, DType::Float64).requires_grad_();
  Tensor y = ops::max_pool2d(x, {2, 2});
  CHECK(y.item() == 5);
  y.backward(full({1, 1, 1, 1}, 3.0, DType::Float64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 0, 0, 0});
  // Overlapping windows that share their maximum add their gradients there.
  Tensor z = from_vector<double>({0, 9, 0, 0, 0, 0}, Shape{1, 1, 1, 6}, DType::Float64).requires_grad_();
  // Windows [0..2] and [1..3] both pick the 9; [2..4] and [3..5] hold only zeros and pick their first.
  ops::sum(ops::max_pool2d(z, {1, 3}, Size2{1, 1})).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 2, 1, 1, 0, 0});
}

TEST_CASE("max_pool2d lets a NaN win its window and keeps the first of equal maxima, on both paths", "[core][pool]") {
  // PyTorch propagates a NaN through max pooling; its index is the NaN's. Over a 2x4 input the
  // fast path has two windows: {1, NaN, 3, 2} -> NaN at 1; {7, 7, 7, 7} -> 7 at 2. With stride
  // (2, 1) the general loop has a third between them, {NaN, 7, 2, 7} -> NaN at 1.
  const double nan = std::nan("");
  const std::vector<double> values{1, nan, 7, 7, 3, 2, 7, 7};
  for (bool fast : {true, false}) {
    INFO((fast ? "2x2 stride 2 (fast path)" : "2x2 stride (2, 1) (general loop)"));
    Tensor x = from_vector<double>(values, Shape{1, 1, 2, 4}, DType::Float64).requires_grad_();
    Tensor y = fast ? ops::max_pool2d(x, {2, 2}) : ops::max_pool2d(x, {2, 2}, Size2{2, 1});
    const std::vector<double> got = y.to_vector<double>();
    CHECK(std::isnan(got.front()));
    CHECK(got.back() == 7);
    y.backward(full(y.shape(), 1.0, DType::Float64));
    const std::vector<double> grad = x.grad().to_vector<double>();
    CHECK(grad[1] == (fast ? 1 : 2));  // the NaN took its windows' gradients (the general path's middle window holds it too)
    CHECK(grad[2] == 1);  // the first 7 of the last window took its gradient
    CHECK(grad[0] == 0);
    CHECK(grad[3] == 0);
  }
}

TEST_CASE("max_pool2d, avg_pool2d and adaptive_avg_pool2d match finite differences", "[core][pool][gradcheck]") {
  int seed = 200;
  for (const PoolCase& k : kPoolCases) {
    Generator g(++seed);
    Tensor x = rand64({k.n, k.c, k.h, k.w}, g);  // ties have probability 0, so max is differentiable here
    INFO("case " << seed - 200);
    check_gradients([&](const std::vector<Tensor>& v) {
      return weighted_sum(ops::max_pool2d(v[0], k.kernel, k.stride, k.padding), seed);
    }, {x});
    for (bool include_pad : {true, false})
      check_gradients([&](const std::vector<Tensor>& v) {
        return weighted_sum(ops::avg_pool2d(v[0], k.kernel, k.stride, k.padding, include_pad), seed);
      }, {x});
    check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::adaptive_avg_pool2d(v[0]), seed); },
                    {x});
  }
}

TEST_CASE("adaptive_avg_pool2d to 1x1 is the mean of each plane", "[core][pool]") {
  Generator g(5);
  Tensor x = rand64({2, 3, 5, 7}, g);
  const Tensor y = ops::adaptive_avg_pool2d(x);
  REQUIRE(y.shape() == Shape{2, 3, 1, 1});
  const auto want = x.reshape({6, 35}).mean(1).to_vector<double>();
  const auto got = y.to_vector<double>();
  // 35 terms, summed in different orders: 1e-15 relative
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-14);
}

TEST_CASE("pooling rejects bad arguments with errors that name the op, the shapes and what was expected",
          "[core][pool][errors]") {
  const Tensor x = zeros({2, 3, 8, 8});
  std::string m = error_message([&] { ops::max_pool2d(zeros({3, 8, 8}), {2, 2}); });
  CHECK_THAT(m, Catch::Contains("max_pool2d") && Catch::Contains("rank 4") && Catch::Contains("[3, 8, 8]"));
  m = error_message([&] { ops::max_pool2d(x, {2, 2}, Size2{0, 2}); });
  CHECK_THAT(m, Catch::Contains("max_pool2d") && Catch::Contains("stride must be >= 1") && Catch::Contains("(0, 2)"));
  m = error_message([&] { ops::avg_pool2d(x, {2, 2}, Size2{2, -1}); });
  CHECK_THAT(m, Catch::Contains("avg_pool2d") && Catch::Contains("stride must be >= 1"));
  m = error_message([&] { ops::max_pool2d(x, {2, 2}, std::nullopt, {2, 0}); });  // padding beyond half the kernel
  CHECK_THAT(m, Catch::Contains("max_pool2d") && Catch::Contains("half the kernel") && Catch::Contains("(2, 0)") &&
                    Catch::Contains("[2, 3, 8, 8]"));
  m = error_message([&] { ops::max_pool2d(x, {9, 2}); });
  CHECK_THAT(m, Catch::Contains("larger than the padded input") && Catch::Contains("(9, 2)"));
  m = error_message([&] { ops::max_pool2d(x, {0, 2}); });
  CHECK_THAT(m, Catch::Contains("kernel size must be >= 1"));
  m = error_message([&] { ops::adaptive_avg_pool2d(x, {2, 2}); });
  CHECK_THAT(m, Catch::Contains("adaptive_avg_pool2d") && Catch::Contains("(1, 1)") && Catch::Contains("(2, 2)"));
  m = error_message([&] { ops::max_pool2d(zeros({2, 3}, DType::Int64).reshape({1, 1, 2, 3}), {1, 1}); });
  CHECK_THAT(m, Catch::Contains("max_pool2d") && Catch::Contains("int64"));
}
