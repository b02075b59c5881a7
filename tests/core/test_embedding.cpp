// embedding (core/ops/embedding): rows picked by index for indices of any shape (a scalar, an
// empty tensor), the weight gradient as the sum of the output-gradient rows of each index
// (repeated indices add up, unused rows are 0), repeatable to the bit, and the errors: an index
// out of range names the op, the index, its position and V; wrong dtypes and shapes.
// Finite differences: tests/core/test_gradcheck_ops.cpp.
#include <catch2/catch.hpp>
#include <vector>

#include "core/ops/embedding.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;
using minidl::testing::rand64;

TEST_CASE("embedding picks weight rows by index for indices of any shape", "[core][embedding]") {
  Generator g(31);
  const int64_t V = 5, D = 3;
  const Tensor w = rand64({V, D}, g);
  const std::vector<double> wv = w.to_vector<double>();
  const std::vector<int64_t> iv = {4, 0, 4, 2, 1, 1};
  const Tensor idx = from_vector(iv, {2, 3}, DType::Int64);
  const Tensor out = ops::embedding(idx, w);
  CHECK(out.shape() == Shape{2, 3, D});
  const std::vector<double> ov = out.to_vector<double>();
  for (size_t i = 0; i < iv.size(); ++i)
    for (size_t j = 0; j < static_cast<size_t>(D); ++j)
      CHECK(ov[i * D + j] == wv[static_cast<size_t>(iv[i]) * D + j]);  // a copy: exact
  // A 0-dim index gives one row [D]; no index gives no row.
  const Tensor one = ops::embedding(scalar_tensor(2.0, DType::Int64), w);
  CHECK(one.shape() == Shape{D});
  CHECK(one.to_vector<double>() == std::vector<double>(wv.begin() + 2 * D, wv.begin() + 3 * D));
  CHECK(ops::embedding(zeros({0}, DType::Int64), w).shape() == Shape{0, D});
  CHECK(ops::embedding(zeros({2, 0}, DType::Int64), w).shape() == Shape{2, 0, D});
  // A strided (non-contiguous) index tensor reads the same positions.
  const Tensor idx_t = idx.t();  // [3, 2]: 4, 2, 0, 1, 4, 1
  const std::vector<double> tv = ops::embedding(idx_t, w).to_vector<double>();
  const std::vector<int64_t> order = {4, 2, 0, 1, 4, 1};
  for (size_t i = 0; i < order.size(); ++i) CHECK(tv[i * D] == wv[static_cast<size_t>(order[i]) * D]);
}

TEST_CASE("embedding backward sums the gradient rows of repeated indices and leaves unused rows 0",
          "[core][embedding]") {
  // Gradient values in eighths: every sum is exact, so the check is equality.
  const int64_t V = 4, D = 2;
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(dtype);
    Tensor w = zeros({V, D}, dtype).requires_grad_();
    const Tensor idx = from_vector(std::vector<int64_t>{3, 1, 3, 3, 0}, {5}, DType::Int64);
    const Tensor dy = from_vector(std::vector<double>{0.5, -1, 0.125, 2, 1.5, 0.25, -0.75, 3, 1, 1}, {5, D}, dtype);
    ops::embedding(idx, w).backward(dy);
    const std::vector<double> got = w.grad().to(DType::Float64).to_vector<double>();
    // row 0: position 4; row 1: position 1; row 2: none; row 3: positions 0, 2, 3.
    CHECK(got == std::vector<double>{1, 1, 0.125, 2, 0, 0, 0.5 + 1.5 - 0.75, -1 + 0.25 + 3});
  }
}

TEST_CASE("embedding backward gives the same bits on every run and with V = 1", "[core][embedding]") {
  Generator g(32);
  const int64_t V = 7, D = 70;  // two column blocks of the CPU kernel
  const Tensor idx = randint(0, V, {300}, DType::Int64, &g);
  const Tensor dy = rand({300, D}, DType::Float32, &g);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor w = zeros({V, D}).requires_grad_();
    ops::embedding(idx, w).backward(dy);
    runs.push_back(w.grad().to_vector<float>());
  }
  CHECK(runs[0] == runs[1]);
  // V = 1: every position names row 0, whose gradient is the column sums of dy.
  Tensor w1 = zeros({1, 3}, DType::Float64).requires_grad_();
  const Tensor dy1 = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  ops::embedding(zeros({2}, DType::Int64), w1).backward(dy1);
  CHECK(w1.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  // No position: the gradient is all zeros.
  Tensor w0 = ones({3, 2}, DType::Float64).requires_grad_();
  ops::embedding(zeros({0}, DType::Int64), w0).sum().backward();
  CHECK(w0.grad().to_vector<double>() == std::vector<double>(6, 0.0));
}

TEST_CASE("embedding rejects an index out of range naming the op, the index, its position and V",
          "[core][embedding][errors]") {
  const Tensor w = zeros({5, 3});
  std::string m = error_message([&] { ops::embedding(from_vector(std::vector<int64_t>{0, 4, 5, 1}), w); });
  CHECK_THAT(m, Catch::Contains("embedding: index 5 at flat position 2") && Catch::Contains("[0, 5)") &&
                    Catch::Contains("weight [5, 3]"));
  m = error_message([&] { ops::embedding(from_vector(std::vector<int64_t>{0, 1, 2, -1}, {2, 2}, DType::Int64), w); });
  CHECK_THAT(m, Catch::Contains("index -1 at flat position 3 of indices [2, 2]"));
}

TEST_CASE("embedding rejects wrong dtypes and shapes with errors that name them", "[core][embedding][errors]") {
  const Tensor w = zeros({5, 3});
  std::string m = error_message([&] { ops::embedding(zeros({4}), w); });
  CHECK_THAT(m, Catch::Contains("embedding: indices must be int64") && Catch::Contains("float32"));
  m = error_message([&] { ops::embedding(zeros({4}, DType::Int64), zeros({15})); });
  CHECK_THAT(m, Catch::Contains("weight must be [num_embeddings, embedding_dim]") && Catch::Contains("[15]"));
  m = error_message([&] { ops::embedding(zeros({4}, DType::Int64), zeros({5, 3}, DType::Int64)); });
  CHECK_THAT(m, Catch::Contains("weight must be a floating dtype") && Catch::Contains("int64"));
  m = error_message([&] { ops::embedding(Tensor(), w); });
  CHECK_THAT(m, Catch::Contains("embedding"));
}
