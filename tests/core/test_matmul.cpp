// matmul (core/ops/linear.cpp) with torch.matmul's shapes, and linear on [..., in]: batched
// products against a naive product of each matrix, batch dims that broadcast (along all of them,
// some of them, or a 2-D operand against a batch), 1-D operands, transposed / narrowed / expanded
// views read in place (the same bits as their contiguous copies), float64 finite differences
// through all of these, and the errors. The 2-D path's finite differences:
// tests/core/test_gradcheck_ops.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/ops.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::check_gradients;
using minidl::testing::error_message;
using minidl::testing::rand64;
using minidl::testing::weighted_sum;

namespace {

// torch.matmul's result for a, b of at least 2 dims, computed without the GEMM: both operands
// broadcast to the full batch (expand + contiguous, tested on their own), then a triple loop in
// long double per matrix. Returns the values row-major and the result shape.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, Shape& shape) {
  Shape batch_a, batch_b;
  for (int d = 0; d < a.dim() - 2; ++d) batch_a.push_back(a.shape()[d]);
  for (int d = 0; d < b.dim() - 2; ++d) batch_b.push_back(b.shape()[d]);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "test");
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1], n = b.shape()[b.dim() - 1];
  Shape fa = batch, fb = batch;
  fa.push_back(m);
  fa.push_back(k);
  fb.push_back(k);
  fb.push_back(n);
  const std::vector<double> va = a.to(DType::Float64).expand(fa).contiguous().to_vector<double>();
  const std::vector<double> vb = b.to(DType::Float64).expand(fb).contiguous().to_vector<double>();
  shape = batch;
  shape.push_back(m);
  shape.push_back(n);
  std::vector<double> out(static_cast<size_t>(shape.numel()));
  for (int64_t i = 0; i < batch.numel(); ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        long double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += static_cast<long double>(va[static_cast<size_t>((i * m + r) * k + p)]) *
               vb[static_cast<size_t>((i * k + p) * n + c)];
        out[static_cast<size_t>((i * m + r) * n + c)] = static_cast<double>(s);
      }
  return out;
}

// float64 result within 1e-13 of the long-double reference: K <= 40 products of values in
// [-1, 1], each rounded once (plus the sums), stay below 1e-14; a lost or misplaced product
// moves an element by ~0.1 or more.
void check_matches_naive(const Tensor& a, const Tensor& b) {
  Shape want_shape;
  const std::vector<double> want = naive_matmul(a, b, want_shape);
  const Tensor got = ops::matmul(a, b);
  INFO("a " << a.shape() << " strides " << a.strides() << ", b " << b.shape() << " strides " << b.strides());
  REQUIRE(got.shape() == want_shape);
  const std::vector<double> v = got.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) CHECK(std::abs(v[i] - want[i]) <= 1e-13);
}

}  // namespace

TEST_CASE("batched matmul matches a naive product of each matrix of the batch", "[core][matmul]") {
  Generator g(1);
  // Odd sizes; K = 40 crosses nothing in particular, M·N·K above 32³ takes the blocked GEMM.
  check_matches_naive(rand64({3, 5, 7}, g), rand64({3, 7, 4}, g));
  check_matches_naive(rand64({2, 3, 5, 7}, g), rand64({2, 3, 7, 9}, g));
  check_matches_naive(rand64({4, 37, 40}, g), rand64({4, 40, 33}, g));
  check_matches_naive(rand64({1, 1, 6, 2}, g), rand64({1, 1, 2, 3}, g));
}

TEST_CASE("batched matmul agrees with the 2-D matmul of each matrix, in float32 too", "[core][matmul]") {
  Generator g(2);
  const Tensor a = uniform({3, 2, 19, 23}, -1, 1, DType::Float32, &g), b = uniform({3, 2, 23, 17}, -1, 1, DType::Float32, &g);
  const Tensor c = ops::matmul(a, b);
  REQUIRE(c.shape() == Shape{3, 2, 19, 17});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const Tensor ai = a.narrow(0, i, 1).narrow(1, j, 1).reshape({19, 23}).clone();
      const Tensor bi = b.narrow(0, i, 1).narrow(1, j, 1).reshape({23, 17}).clone();
      const std::vector<float> want = ops::matmul(ai, bi).to_vector<float>();
      const std::vector<float> got = c.narrow(0, i, 1).narrow(1, j, 1).reshape({19, 17}).to_vector<float>();
      CHECK(got == want);  // the same GEMM on the same matrix: the same bits
    }
}

TEST_CASE("batched matmul broadcasts the batch dims as torch.matmul does", "[core][matmul]") {
  Generator g(3);
  check_matches_naive(rand64({2, 1, 5, 7}, g), rand64({3, 7, 4}, g));     // -> [2, 3, 5, 4]
  check_matches_naive(rand64({5, 7}, g), rand64({2, 3, 7, 4}, g));        // a 2-D a against a batch
  check_matches_naive(rand64({2, 3, 5, 7}, g), rand64({7, 4}, g));        // a 2-D b against a batch
  check_matches_naive(rand64({2, 1, 5, 7}, g), rand64({1, 3, 7, 4}, g));  // each broadcast along one dim
  check_matches_naive(rand64({1, 5, 7}, g), rand64({4, 7, 6}, g));
  CHECK(ops::matmul(rand64({2, 1, 5, 7}, g), rand64({1, 3, 7, 4}, g)).shape() == Shape{2, 3, 5, 4});
}

TEST_CASE("matmul of 1-D operands adds and drops a dim as torch.matmul does", "[core][matmul]") {
  Generator g(4);
  const Tensor v = rand64({7}, g), w = rand64({7}, g);
  const Tensor dot = ops::matmul(v, w);
  CHECK(dot.dim() == 0);
  double want = 0;
  for (int64_t i = 0; i < 7; ++i) want += v.at({i}) * w.at({i});
  CHECK(std::abs(dot.item() - want) <= 1e-14);

  const Tensor m = rand64({7, 4}, g), a = rand64({5, 7}, g), batch_b = rand64({2, 7, 4}, g), batch_a = rand64({2, 5, 7}, g);
  struct Case {
    Tensor got, want;
  };
  const std::vector<Case> cases = {
      {ops::matmul(v, m), ops::matmul(v.reshape({1, 7}), m).reshape({4})},
      {ops::matmul(a, v), ops::matmul(a, v.reshape({7, 1})).reshape({5})},
      {ops::matmul(v, batch_b), ops::matmul(v.reshape({1, 7}), batch_b).reshape({2, 4})},
      {ops::matmul(batch_a, v), ops::matmul(batch_a, v.reshape({7, 1})).reshape({2, 5})},
  };
  for (const Case& c : cases) {
    REQUIRE(c.got.shape() == c.want.shape());
    CHECK(c.got.to_vector<double>() == c.want.to_vector<double>());
  }
}

TEST_CASE("matmul reads transposed, narrowed and expanded views with the bits of their contiguous copies",
          "[core][matmul]") {
  Generator g(5);
  // Sizes above 32³ per product, so the blocked GEMM packs the operands from their strides.
  const Tensor q = rand64({2, 3, 41, 36}, g), k = rand64({2, 3, 43, 36}, g);
  const Tensor kt = k.transpose(-2, -1);  // [2, 3, 36, 43], column-major last two dims
  const Tensor scores = ops::matmul(q, kt);
  const Tensor kt_copy = kt.clone();
  CHECK(kt_copy.is_contiguous());
  const Tensor scores_from_copy = ops::matmul(q, kt_copy);
  CHECK(scores.to_vector<double>() == scores_from_copy.to_vector<double>());

  // Both operands transposed; a narrowed window (row stride > columns); a batch dim swapped with
  // the rows (matrices interleaved in memory: batch stride 36, row stride 72) and an operand
  // expanded along the batch (batch stride 0).
  const Tensor at = rand64({2, 36, 41}, g).transpose(1, 2), bt = rand64({2, 33, 36}, g).transpose(-1, -2);
  CHECK(ops::matmul(at, bt).to_vector<double>() == ops::matmul(at.clone(), bt.clone()).to_vector<double>());
  const Tensor wide = rand64({2, 41, 50}, g), window = wide.narrow(2, 7, 36);
  CHECK(ops::matmul(window, bt).to_vector<double>() == ops::matmul(window.clone(), bt.clone()).to_vector<double>());
  const Tensor mixed = rand64({41, 2, 36}, g).transpose(0, 1);  // [2, 41, 36]
  CHECK(ops::matmul(mixed, bt).to_vector<double>() == ops::matmul(mixed.clone(), bt.clone()).to_vector<double>());
  const Tensor shared = rand64({1, 41, 36}, g).expand({2, 41, 36});
  CHECK(ops::matmul(shared, bt).to_vector<double>() == ops::matmul(shared.clone(), bt.clone()).to_vector<double>());
  check_matches_naive(q, kt);
  check_matches_naive(mixed, bt);
}

TEST_CASE("batched matmul with an empty batch, M, N or K gives the empty result or zeros", "[core][matmul]") {
  Generator g(6);
  CHECK(ops::matmul(rand64({0, 3, 4}, g), rand64({4, 5}, g)).shape() == Shape{0, 3, 5});
  CHECK(ops::matmul(rand64({2, 0, 4}, g), rand64({2, 4, 5}, g)).shape() == Shape{2, 0, 5});
  const Tensor zero_k = ops::matmul(rand64({2, 3, 0}, g), rand64({2, 0, 5}, g));
  REQUIRE(zero_k.shape() == Shape{2, 3, 5});
  CHECK(zero_k.to_vector<double>() == std::vector<double>(30, 0.0));
}

TEST_CASE("batched matmul matches finite differences, with broadcast batch dims, 1-D and transposed operands",
          "[core][matmul][gradcheck]") {
  Generator g(7);
  const uint64_t seed = 70;
  auto product = [&](const std::vector<Tensor>& v) { return weighted_sum(ops::matmul(v[0], v[1]), seed); };
  check_gradients(product, {rand64({2, 3, 4}, g), rand64({2, 4, 5}, g)});
  check_gradients(product, {rand64({2, 1, 3, 4}, g), rand64({3, 4, 2}, g)});     // both broadcast
  check_gradients(product, {rand64({3, 4}, g), rand64({2, 2, 4, 3}, g)});        // a 2-D a shared by the batch
  check_gradients(product, {rand64({2, 1, 3, 4}, g), rand64({1, 2, 4, 3}, g)});  // copied broadcasts
  check_gradients(product, {rand64({4}, g), rand64({2, 4, 3}, g)});
  check_gradients(product, {rand64({2, 3, 4}, g), rand64({4}, g)});
  check_gradients(product, {rand64({4}, g), rand64({4}, g)});
  // q·kᵀ with k's transpose a view: dk comes back through the transpose.
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::matmul(v[0], v[1].transpose(-2, -1)), seed); },
                  {rand64({2, 3, 5, 4}, g), rand64({2, 3, 6, 4}, g)});
}

TEST_CASE("matmul names the shapes and what it expected when the arguments are wrong", "[core][matmul]") {
  Generator g(8);
  const Tensor a = rand64({2, 3, 4}, g);
  CHECK_THAT(error_message([&] { ops::matmul(a, rand64({2, 5, 6}, g)); }),
             Catch::Contains("matmul: inner dimensions differ") && Catch::Contains("[2, 3, 4]") &&
                 Catch::Contains("[2, 5, 6]"));
  CHECK_THAT(error_message([&] { ops::matmul(a, rand64({3, 4, 6}, g)); }),
             Catch::Contains("matmul") && Catch::Contains("[2]") && Catch::Contains("[3]"));
  CHECK_THAT(error_message([&] { ops::matmul(a, from_vector(std::vector<double>{1.0}, Shape{})); }),
             Catch::Contains("matmul: both arguments need at least 1 dim"));
  CHECK_THAT(error_message([&] { ops::matmul(a, uniform({4, 2}, -1, 1, DType::Float32, &g)); }),
             Catch::Contains("matmul: dtypes differ"));
  CHECK_THAT(error_message([&] { ops::matmul(zeros({3, 4}, DType::Int64), zeros({4, 2}, DType::Int64)); }),
             Catch::Contains("matmul") && Catch::Contains("int64"));
  CHECK_THAT(error_message([&] { ops::matmul(rand64({4}, g), rand64({5}, g)); }),
             Catch::Contains("matmul: inner dimensions differ"));
}

TEST_CASE("linear accepts x of shape [..., in] and gives [..., out] with the gradients of the flattened rows",
          "[core][matmul][linear]") {
  Generator g(9);
  const Tensor x = rand64({2, 3, 5}, g), w = rand64({4, 5}, g), b = rand64({4}, g);
  const Tensor y = ops::linear(x, w, b);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const Tensor rows = ops::linear(x.reshape({6, 5}), w, b);
  CHECK(y.to_vector<double>() == rows.to_vector<double>());
  const Tensor one = ops::linear(rand64({5}, g), w, b);
  CHECK(one.shape() == Shape{4});
  CHECK(ops::linear(rand64({2, 0, 5}, g), w, b).shape() == Shape{2, 0, 4});
  // A transposed x (not contiguous) is copied into rows, with the same result as its copy.
  const Tensor xt = rand64({5, 3, 2}, g).transpose(0, 2);
  CHECK(ops::linear(xt, w, b).to_vector<double>() == ops::linear(xt.clone(), w, b).to_vector<double>());

  const uint64_t seed = 90;
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::linear(v[0], v[1], v[2]), seed); },
                  {rand64({2, 3, 5}, g), rand64({4, 5}, g), rand64({4}, g)});
  check_gradients([&](const std::vector<Tensor>& v) { return weighted_sum(ops::linear(v[0], v[1]), seed); },
                  {rand64({5}, g), rand64({4, 5}, g)});
  CHECK_THAT(error_message([&] { ops::linear(rand64({2, 3, 6}, g), w, b); }),
             Catch::Contains("linear: expected x with last dim 5") && Catch::Contains("[4, 5]") &&
                 Catch::Contains("got x [2, 3, 6]"));
}
