// tril, triu and masked_fill (core/ops/mask.cpp): values against the index rule torch states,
// every diagonal offset including ones past the matrix, batches of matrices, masks of each
// dtype and broadcast masks, the gradient (0 where filled or cut), finite differences, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/ops.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::error_message;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

TEST_CASE("tril and triu keep the elements on their side of each diagonal of every matrix", "[core][mask]") {
  Generator g(1);
  const Tensor x = rand64({2, 3, 4, 5}, g);
  for (int64_t diagonal : {-5, -1, 0, 1, 3, 6}) {
    const Tensor lower = ops::tril(x, diagonal), upper = ops::triu(x, diagonal);
    REQUIRE(lower.shape() == x.shape());
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t r = 0; r < 4; ++r)
          for (int64_t c = 0; c < 5; ++c) {
            const double v = x.at({i, j, r, c});
            INFO("diagonal " << diagonal << " at " << r << ", " << c);
            CHECK(lower.at({i, j, r, c}) == (c - r <= diagonal ? v : 0.0));
            CHECK(upper.at({i, j, r, c}) == (c - r >= diagonal ? v : 0.0));
          }
  }
  // The defaults, on a view: the main diagonal belongs to both.
  const Tensor ones = from_vector(std::vector<float>(9, 1.0f), {3, 3});
  CHECK(ops::tril(ones).to_vector<float>() == std::vector<float>{1, 0, 0, 1, 1, 0, 1, 1, 1});
  CHECK(ops::triu(ones.transpose(0, 1)).to_vector<float>() == std::vector<float>{1, 1, 1, 0, 1, 1, 0, 0, 1});
  CHECK(ops::tril(rand64({0, 3}, g)).shape() == Shape{0, 3});
}

TEST_CASE("tril and triu match finite differences", "[core][mask][gradcheck]") {
  Generator g(2);
  const uint64_t seed = 20;
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::tril(v[0]), seed); }, {rand64({2, 4, 3}, g)});
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::triu(v[0], 1), seed); }, {rand64({3, 5}, g)});
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::tril(v[0], -1), seed); }, {rand64({4, 4}, g)});
}

TEST_CASE("masked_fill puts the value where a float, int64 or broadcast mask is nonzero", "[core][mask]") {
  Generator g(3);
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = rand64({2, 3, 4, 4}, g);
  // The causal mask of attention: [T, T] broadcast over [B, H, T, T], -inf above the diagonal.
  const Tensor causal = ops::triu(from_vector(std::vector<float>(16, 1.0f), {4, 4}), 1);
  const Tensor y = ops::masked_fill(x, causal, -inf);
  REQUIRE(y.shape() == x.shape());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 4; ++c) CHECK(y.at({i, h, r, c}) == (c > r ? -inf : x.at({i, h, r, c})));
  // The 0/1 float32 tensors of eq, int64 masks (any nonzero is true), a mask of x's own dtype.
  const Tensor v = from_vector(std::vector<double>{1, 2, 3, 4}, {4});
  const Tensor eq_mask = ops::eq(v, from_vector(std::vector<double>{1, 0, 3, 0}, {4}));
  CHECK(ops::masked_fill(v, eq_mask, 9).to_vector<double>() == std::vector<double>{9, 2, 9, 4});
  const Tensor int_mask = from_vector(std::vector<int64_t>{0, -2, 0, 7}, {4});
  CHECK(ops::masked_fill(v, int_mask, 0.5).to_vector<double>() == std::vector<double>{1, 0.5, 3, 0.5});
  const Tensor column = from_vector(std::vector<double>{0, 1}, {2, 1});  // [2, 1] over [2, 4]
  CHECK(ops::masked_fill(v.expand({2, 4}), column, -1).to_vector<double>() ==
        std::vector<double>{1, 2, 3, 4, -1, -1, -1, -1});
  // A mask read through its strides: transposed, and broadcast along an inner dim ([2, 1, 4]
  // over [2, 3, 4]); both give what their contiguous expansions give.
  const Tensor square = rand64({2, 3, 4}, g);
  const Tensor flips = ops::eq(from_vector(std::vector<double>{0, 1, 1, 0, 1, 0, 0, 0}, {2, 1, 4}),
                               from_vector(std::vector<double>{1}, {1}));
  const Tensor flips_full = flips.expand({2, 3, 4}).clone();
  CHECK(ops::masked_fill(square, flips, -3).to_vector<double>() ==
        ops::masked_fill(square, flips_full, -3).to_vector<double>());
  const Tensor sq = rand64({3, 3}, g);
  const Tensor upper = ops::triu(from_vector(std::vector<double>(9, 1.0), {3, 3}), 1);
  CHECK(ops::masked_fill(sq, upper.transpose(0, 1), 5).to_vector<double>() ==
        ops::masked_fill(sq, upper.transpose(0, 1).clone(), 5).to_vector<double>());
  // Any nonzero is true even where a cast to x's dtype would round it to 0: 0.5 for int64 x,
  // 1e-50 (below float32's range) for float32 x.
  const Tensor ints = from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  CHECK(ops::masked_fill(ints, from_vector(std::vector<double>{0.5, 0, -0.25}, {3}), 7).to_vector<int64_t>() ==
        std::vector<int64_t>{7, 2, 7});
  const Tensor floats = from_vector(std::vector<float>{1, 2}, {2});
  CHECK(ops::masked_fill(floats, from_vector(std::vector<double>{1e-50, 0}, {2}), 0).to_vector<float>() ==
        std::vector<float>{0, 2});
  // NaN in x stays where the mask is 0 and is replaced where it is 1.
  const Tensor with_nan = from_vector(std::vector<float>{NAN, NAN}, {2});
  const std::vector<float> filled = ops::masked_fill(with_nan, from_vector(std::vector<float>{0, 1}, {2}), 3).to_vector<float>();
  CHECK(std::isnan(filled[0]));
  CHECK(filled[1] == 3.0f);
}

TEST_CASE("masked_fill's gradient is 0 where filled and passes through elsewhere", "[core][mask][gradcheck]") {
  Generator g(4);
  const uint64_t seed = 40;
  const Tensor mask = from_vector(std::vector<double>{1, 0, 0, 1, 0, 1}, {2, 3});
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::masked_fill(v[0], mask, 2.5), seed); },
                  {rand64({4, 2, 3}, g)});
  Tensor x = rand64({2, 3}, g);
  x.requires_grad_(true);
  ops::masked_fill(x, mask, -1e9).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 0, 1, 0});
}

TEST_CASE("tril, triu and masked_fill name the shapes they cannot take", "[core][mask]") {
  Generator g(5);
  CHECK_THAT(error_message([&] { ops::tril(rand64({4}, g)); }),
             Catch::Contains("tril: expected a tensor with at least 2 dims") && Catch::Contains("[4]"));
  CHECK_THAT(error_message([&] { ops::triu(rand64({}, g)); }), Catch::Contains("triu"));
  CHECK_THAT(error_message([&] { ops::masked_fill(rand64({2, 3}, g), rand64({3, 3}, g), 0); }),
             Catch::Contains("masked_fill: mask of shape [3, 3] does not broadcast to x's shape [2, 3]"));
  CHECK_THAT(error_message([&] { ops::masked_fill(rand64({3}, g), rand64({2, 3}, g), 0); }),
             Catch::Contains("masked_fill: mask of shape [2, 3]"));
  CHECK_THAT(error_message([&] { ops::masked_fill(rand64({3}, g), Tensor(), 0); }), Catch::Contains("masked_fill"));
}
