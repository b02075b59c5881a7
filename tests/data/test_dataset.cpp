// Datasets: TensorDataset's row views and its one-gather batches, the default stacking
// get_batch, make_random_classification's seeding and label range, and the errors.
#include <catch2/catch.hpp>

#include "data/data.h"

using namespace minidl;
using namespace minidl::data;

namespace {
// A dataset without a batch fast path, to test the default stacking.
struct SquaresDataset : Dataset {
  Example get(int64_t i) const override {
    return Example{full({2}, static_cast<double>(i * i)), full({}, static_cast<double>(i), DType::Int64)};
  }
  int64_t size() const override { return 20; }
};
}  // namespace

TEST_CASE("TensorDataset get(i) returns row i of x and of y", "[data]") {
  Tensor x = arange(12, DType::Float32).reshape({4, 3});  // [4, 3], x[i][j] = 3i + j
  Tensor y = arange(8, DType::Int64).reshape({4, 2});     // [4, 2], 2-D labels work too
  TensorDataset ds(x, y);
  CHECK(ds.size() == 4);
  Example e = ds.get(2);
  CHECK(e.x.shape() == Shape{3});
  CHECK(e.y.shape() == Shape{2});
  CHECK(e.x.to_vector<float>() == std::vector<float>{6, 7, 8});
  CHECK(e.y.to_vector<int64_t>() == std::vector<int64_t>{4, 5});
}

TEST_CASE("TensorDataset get_batch equals stacking get(i), in the order asked", "[data]") {
  Generator g(7);
  auto ds = std::make_shared<TensorDataset>(randn({30, 4}, {}, &g), randint(0, 5, {30}, DType::Int64, &g));
  const std::vector<int64_t> idx{17, 3, 3, 29, 0};  // repeats and any order are allowed
  Batch fast = ds->get_batch(idx);
  Batch stacked = ds->Dataset::get_batch(idx);  // the generic path: cat of unsqueezed get(i)
  CHECK(fast.x.shape() == Shape{5, 4});
  CHECK(fast.y.shape() == Shape{5});
  CHECK(fast.x.dtype() == DType::Float32);
  CHECK(fast.y.dtype() == DType::Int64);
  // Exact equality: both paths copy the same floats, no arithmetic.
  CHECK(fast.x.to_vector<float>() == stacked.x.to_vector<float>());
  CHECK(fast.y.to_vector<int64_t>() == stacked.y.to_vector<int64_t>());
  CHECK(fast.x.at({0, 2}) == ds->get(17).x.at({2}));
}

TEST_CASE("the default get_batch stacks examples along a new dim 0", "[data]") {
  SquaresDataset ds;
  Batch b = ds.get_batch({2, 3});
  CHECK(b.x.shape() == Shape{2, 2});
  CHECK(b.y.shape() == Shape{2});
  CHECK(b.x.to_vector<float>() == std::vector<float>{4, 4, 9, 9});
  CHECK(b.y.to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  CHECK_THROWS_WITH(ds.get_batch({1, 20}), Catch::Contains("index 20 out of range"));
  CHECK_THROWS_WITH(ds.get_batch({}), Catch::Contains("empty"));
}

TEST_CASE("TensorDataset rejects mismatched sizes and bad indices with clear errors", "[data]") {
  CHECK_THROWS_WITH(TensorDataset(zeros({3, 2}), zeros({4})),
                    Catch::Contains("x has 3 examples") && Catch::Contains("[3, 2]") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(TensorDataset(Tensor(), zeros({4})), Catch::Contains("TensorDataset"));
  CHECK_THROWS_WITH(TensorDataset(scalar_tensor(1.0), zeros({1})), Catch::Contains("leading example dim"));
  TensorDataset ds(zeros({3, 2}), zeros({3}));
  CHECK_THROWS_WITH(ds.get(3), Catch::Contains("index 3 out of range"));
  CHECK_THROWS_WITH(ds.get(-1), Catch::Contains("index -1 out of range"));
  CHECK_THROWS_WITH(ds.get_batch({0, 5}), Catch::Contains("index 5 is out of range"));
  CHECK_THROWS_WITH(ds.get_batch({}), Catch::Contains("empty"));
}

TEST_CASE("the random classification dataset is seeded and its labels lie in 0..C-1", "[data]") {
  auto a = make_random_classification(100, 10, 3, 42), b = make_random_classification(100, 10, 3, 42);
  CHECK(a->size() == 100);
  CHECK(a->features().shape() == Shape{100, 10});
  CHECK(a->features().dtype() == DType::Float32);
  CHECK(a->labels().shape() == Shape{100});
  CHECK(a->labels().dtype() == DType::Int64);
  CHECK(a->features().to_vector<float>() == b->features().to_vector<float>());
  CHECK(a->labels().to_vector<int64_t>() == b->labels().to_vector<int64_t>());
  std::vector<int64_t> counts(3, 0);
  for (int64_t y : a->labels().to_vector<int64_t>()) {
    REQUIRE((y >= 0 && y < 3));
    ++counts[static_cast<size_t>(y)];
  }
  // 100 uniform draws over 3 classes: each class missing entirely has probability ~(2/3)^100.
  for (int64_t c : counts) CHECK(c > 0);
  CHECK(make_random_classification(100, 10, 3, 43)->features().to_vector<float>() != a->features().to_vector<float>());
  CHECK_THROWS_AS(make_random_classification(0, 10, 3, 1), Error);
  CHECK_THROWS_AS(make_random_classification(10, 10, 0, 1), Error);
}
