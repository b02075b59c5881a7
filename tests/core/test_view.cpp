// cat, split and chunk (core/ops/view.cpp) along any dim, negative dims counting from the end:
// values against the parts, the sizes torch gives, finite differences through cat, and errors.
#include <catch2/catch.hpp>

#include <vector>

#include "core/ops.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::error_message;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

TEST_CASE("cat joins along any dim, negative dims counting from the end", "[core][view][cat]") {
  Generator g(1);
  const Tensor a = rand64({2, 3, 4}, g), b = rand64({2, 1, 4}, g), c = rand64({2, 2, 4}, g);
  for (int64_t dim : {1, -2}) {
    const Tensor out = ops::cat({a, b, c}, dim);
    REQUIRE(out.shape() == Shape{2, 6, 4});
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t k = 0; k < 4; ++k) {
          const double want = j < 3 ? a.at({i, j, k}) : j < 4 ? b.at({i, j - 3, k}) : c.at({i, j - 4, k});
          CHECK(out.at({i, j, k}) == want);
        }
  }
  const Tensor x = rand64({2, 3, 1}, g), y = rand64({2, 3, 2}, g);
  const Tensor last = ops::cat({x, y}, -1);
  REQUIRE(last.shape() == Shape{2, 3, 3});
  CHECK(last.narrow(2, 0, 1).clone().to_vector<double>() == x.to_vector<double>());
  CHECK(last.narrow(2, 1, 2).clone().to_vector<double>() == y.to_vector<double>());
  // A transposed part is read through its strides; an empty part adds nothing.
  const Tensor t = rand64({4, 2, 3}, g).transpose(0, 2);  // [3, 2, 4]
  const Tensor with_t = ops::cat({a.transpose(0, 1), t, rand64({0, 2, 4}, g)}, 0);
  REQUIRE(with_t.shape() == Shape{6, 2, 4});
  CHECK(with_t.narrow(0, 3, 3).clone().to_vector<double>() == t.clone().to_vector<double>());
}

TEST_CASE("cat along an inner dim matches finite differences", "[core][view][cat][gradcheck]") {
  Generator g(2);
  const uint64_t seed = 20;
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::cat({v[0], v[1]}, -1), seed); },
                  {rand64({2, 3, 2}, g), rand64({2, 3, 3}, g)});
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::cat({v[0], v[1], v[0]}, 1), seed); },
                  {rand64({2, 1, 3}, g), rand64({2, 2, 3}, g)});
}

TEST_CASE("cat names the part and the shapes that disagree", "[core][view][cat]") {
  Generator g(3);
  const Tensor a = rand64({2, 3}, g);
  CHECK_THAT(error_message([&] { ops::cat({a, rand64({3, 3}, g)}, 1); }),
             Catch::Contains("cat: tensor 1 is [3, 3]") && Catch::Contains("except dim 1"));
  CHECK_THAT(error_message([&] { ops::cat({a, rand64({2, 3, 1}, g)}, 0); }), Catch::Contains("cat: tensor 1"));
  CHECK_THAT(error_message([&] { ops::cat({a, a}, 2); }), Catch::Contains("cat"));
  CHECK_THAT(error_message([&] { ops::cat({a, a}, -3); }), Catch::Contains("cat"));
  CHECK_THAT(error_message([&] { ops::cat({}, 0); }), Catch::Contains("cat: expected at least one tensor"));
}

TEST_CASE("split and chunk cut along any dim, negative dims counting from the end, as torch does", "[core][view]") {
  Generator g(4);
  const Tensor x = rand64({2, 7, 5}, g);
  for (int64_t dim : {1, -2}) {
    const std::vector<Tensor> parts = ops::split(x, 3, dim);  // 3, 3, 1
    REQUIRE(parts.size() == 3);
    CHECK(parts[0].shape() == Shape{2, 3, 5});
    CHECK(parts[2].shape() == Shape{2, 1, 5});
    CHECK(ops::cat(parts, dim).to_vector<double>() == x.to_vector<double>());
    const std::vector<Tensor> chunks = ops::chunk(x, 3, dim);  // ceil(7 / 3) = 3: 3, 3, 1
    REQUIRE(chunks.size() == 3);
    CHECK(chunks[1].shape() == Shape{2, 3, 5});
    CHECK(chunks[1].at({1, 2, 4}) == x.at({1, 5, 4}));
  }
  const std::vector<Tensor> last = x.chunk(2, -1);  // 3, 2
  REQUIRE(last.size() == 2);
  CHECK(last[0].shape() == Shape{2, 7, 3});
  CHECK(last[1].at({1, 6, 1}) == x.at({1, 6, 4}));
  // q, k, v = qkv.split(C, dim=2), the GPT's attention input.
  const Tensor qkv = rand64({2, 4, 9}, g);
  const std::vector<Tensor> heads = qkv.split(3, 2);
  REQUIRE(heads.size() == 3);
  CHECK(heads[2].at({1, 3, 0}) == qkv.at({1, 3, 6}));
  CHECK_THAT(error_message([&] { ops::split(x, 2, 3); }), Catch::Contains("split"));
  CHECK_THAT(error_message([&] { ops::chunk(x, 2, -4); }), Catch::Contains("chunk"));
}
