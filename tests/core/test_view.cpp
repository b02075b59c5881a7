// cat, split, chunk and unbind (core/ops/view.cpp) along any dim, negative dims counting from
// the end: values against the parts, the sizes torch gives, finite differences, errors, and the
// gradient of split/unbind's one node (SplitBackward) against one narrow per part, bit for bit.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <utility>
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

TEST_CASE("unbind gives the slices along dim without it, views that share the input's storage", "[core][view]") {
  Generator g(5);
  const Tensor x = rand64({2, 3, 4}, g);
  for (int64_t dim : {1, -2}) {
    const std::vector<Tensor> parts = ops::unbind(x, dim);
    REQUIRE(parts.size() == 3);
    for (int64_t j = 0; j < 3; ++j) {
      CHECK(parts[j].shape() == Shape{2, 4});
      CHECK(parts[j].storage().data() == x.storage().data());
      CHECK(parts[j].at({1, 3}) == x.at({1, j, 3}));
    }
  }
  const std::vector<Tensor> rows = x.unbind();  // dim 0
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].clone().to_vector<double>() == x.narrow(0, 1, 1).clone().to_vector<double>());
  CHECK(x.split(3, 1)[0].storage().data() == x.storage().data());
  CHECK(ops::unbind(rand64({0, 3}, g), 0).empty());
  CHECK_THAT(error_message([&] { ops::unbind(x, 3); }), Catch::Contains("unbind"));
}

TEST_CASE("split and unbind record one node for all their parts, and none without grad", "[core][view]") {
  Tensor x = ones({6, 2}).requires_grad_();
  const std::vector<Tensor> parts = x.split(4);  // 4, 2
  REQUIRE(parts[0].grad_fn() != nullptr);
  CHECK(parts[0].grad_fn() == parts[1].grad_fn());
  CHECK(parts[0].grad_fn()->name() == "SplitBackward");
  CHECK(x.unbind(1)[0].grad_fn()->name() == "UnbindBackward");
  CHECK(x.chunk(3)[2].grad_fn()->name() == "SplitBackward");
  CHECK_FALSE(ones({6, 2}).split(4)[0].requires_grad());
  NoGradGuard no_grad;
  CHECK(x.unbind(0)[0].grad_fn() == nullptr);
}

namespace {

using PartsFn = std::function<std::vector<Tensor>(const Tensor&)>;
using LossFn = std::function<Tensor(const std::vector<Tensor>&)>;

// How a loss uses the three parts: every one, one unused, one used twice (once through a
// transpose, so its gradient arrives strided).
const std::vector<std::pair<std::string, LossFn>>& part_uses() {
  static const std::vector<std::pair<std::string, LossFn>> uses = {
      {"every part", [](const std::vector<Tensor>& p) {
         return weighted_sum(p[0], 1) + weighted_sum(p[1], 2) + weighted_sum(p[2], 3);
       }},
      {"the middle part unused", [](const std::vector<Tensor>& p) { return weighted_sum(p[0], 1) + weighted_sum(p[2], 3); }},
      {"only the last part", [](const std::vector<Tensor>& p) { return weighted_sum(p[2], 3); }},
      {"a part used twice", [](const std::vector<Tensor>& p) {
         return weighted_sum(p[1], 2) + weighted_sum(p[1].transpose(0, 1), 4) + weighted_sum(p[0], 1) +
                weighted_sum(p[2], 3);
       }},
  };
  return uses;
}

// The gradient of `loss` w.r.t. a leaf holding `values`, cut into parts by `cut`: of the leaf
// itself, or (transposed) of its transpose(0, 2), a non-contiguous input to the cut.
Tensor grad_through(const Tensor& values, bool transposed, const PartsFn& cut, const LossFn& loss) {
  Tensor leaf = values.detach().requires_grad_();
  const Tensor x = transposed ? leaf.transpose(0, 2) : leaf;
  loss(cut(x)).backward();
  return transposed ? leaf.grad().transpose(0, 2) : leaf.grad();  // in x's coordinates
}

// Element-by-element equality of two gradients of one dtype (== counts -0 equal to +0: the
// narrow path adds zeros of other windows, which turns a -0 into +0).
void check_same_gradient(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  if (got.dtype() == DType::Float32) {
    CHECK(got.contiguous().to_vector<float>() == want.contiguous().to_vector<float>());
  } else {
    CHECK(got.contiguous().to_vector<double>() == want.contiguous().to_vector<double>());
  }
}

}  // namespace

TEST_CASE("split, chunk and unbind gradients equal one narrow per part, bit for bit", "[core][view]") {
  // Each cut into three parts along dim 1 of a [4, 7, 5] (or [4, 3, 5] for unbind) input, and
  // the same parts made by narrow, the path whose gradient allocates a zero-filled input-sized
  // buffer per part and sums them. The copies are exact, so the gradients must be equal.
  struct Cut {
    std::string name;
    Shape shape;  // of the input, after the transpose when there is one
    PartsFn cut, by_narrow;
  };
  const std::vector<Cut> cuts = {
      {"split(3, 1)", {4, 7, 5}, [](const Tensor& x) { return x.split(3, 1); },
       [](const Tensor& x) { return std::vector<Tensor>{x.narrow(1, 0, 3), x.narrow(1, 3, 3), x.narrow(1, 6, 1)}; }},
      {"chunk(3, -2)", {4, 7, 5}, [](const Tensor& x) { return x.chunk(3, -2); },
       [](const Tensor& x) { return std::vector<Tensor>{x.narrow(1, 0, 3), x.narrow(1, 3, 3), x.narrow(1, 6, 1)}; }},
      {"unbind(1)", {4, 3, 5}, [](const Tensor& x) { return x.unbind(1); },
       [](const Tensor& x) {
         return std::vector<Tensor>{x.narrow(1, 0, 1).squeeze(1), x.narrow(1, 1, 1).squeeze(1),
                                    x.narrow(1, 2, 1).squeeze(1)};
       }},
  };
  Generator g(6);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Cut& c : cuts) {
      for (bool transposed : {false, true}) {
        const Shape stored = transposed ? Shape{c.shape[2], c.shape[1], c.shape[0]} : c.shape;
        const Tensor values = randn(stored, dtype, &g);
        for (const auto& [use, loss] : part_uses()) {
          INFO(c.name << " of a " << (transposed ? "transposed " : "contiguous ") << dtype << " input, " << use);
          const Tensor got = grad_through(values, transposed, c.cut, loss);
          const Tensor want = grad_through(values, transposed, c.by_narrow, loss);
          check_same_gradient(got, want);
          if (use == "the middle part unused") {  // its window was zero-filled, not left uninitialised
            const Tensor window = c.by_narrow(got)[1];
            CHECK(ops::sum(window * window).item() == 0.0);
          }
        }
      }
    }
  }
}

TEST_CASE("split, chunk and unbind match finite differences, parts unused and used twice", "[core][view][gradcheck]") {
  Generator g(7);
  const uint64_t seed = 70;
  check_gradients(
      [&](const std::vector<Tensor>& v) {
        const std::vector<Tensor> p = v[0].split(2, 1);  // [3, 2, 2], [3, 2, 2], [3, 1, 2]; p[1] unused
        return weighted_sum(p[0], seed) + weighted_sum(p[0] * p[0], seed + 1) + weighted_sum(p[2], seed + 2);
      },
      {rand64({3, 5, 2}, g)});
  check_gradients(
      [&](const std::vector<Tensor>& v) {
        const std::vector<Tensor> p = v[0].unbind(-1);  // three [3, 4]
        return weighted_sum(p[0] * p[2], seed) + weighted_sum(p[2].t(), seed + 1) + weighted_sum(p[1], seed + 2);
      },
      {rand64({3, 4, 3}, g)});
  check_gradients(
      [&](const std::vector<Tensor>& v) {
        const std::vector<Tensor> p = v[0].transpose(0, 1).chunk(2, 0);  // a non-contiguous input: [2, 3], [1, 3]
        return weighted_sum(p[1], seed) + weighted_sum(p[0] * v[0].t().narrow(0, 0, 2), seed + 1);
      },
      {rand64({3, 3}, g)});
}

TEST_CASE("the parts of one split can be backpropagated one at a time", "[core][view]") {
  // As when each part had a narrow of its own: the one node saved nothing a backward frees.
  Tensor x = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  const std::vector<Tensor> parts = x.split(2);
  ops::sum(parts[0]).backward();
  ops::sum(parts[1] * 3.0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 3, 3});
  // A part that is backward's root gets the unit seed; the other window gets zeros.
  Tensor y = from_vector<double>({5, 6, 7}).requires_grad_();
  y.unbind()[1].backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 1, 0});
}
