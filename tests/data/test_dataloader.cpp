// DataLoader and samplers: coverage of every index, drop_last, seeded shuffling that is the
// same across runs and different across epochs, and workers that change nothing but speed.
#include <catch2/catch.hpp>
#include <algorithm>
#include <set>

#include "data/data.h"

using namespace minidl;
using namespace minidl::data;

namespace {
// x[i] = [i, i], y[i] = i: a batch tells exactly which examples it holds.
std::shared_ptr<TensorDataset> identity_dataset(int64_t n) {
  Tensor ids = arange(n, DType::Int64);
  Tensor x = ids.to(DType::Float32).unsqueeze(1).expand({n, 2}).contiguous();
  return std::make_shared<TensorDataset>(x, ids);
}

std::vector<std::vector<int64_t>> epoch_batches(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader) {
    REQUIRE(b.x.shape()[0] == b.y.shape()[0]);
    out.push_back(b.y.to_vector<int64_t>());
  }
  return out;
}
}  // namespace

TEST_CASE("every index appears exactly once per epoch, shuffled or not", "[data]") {
  for (bool shuffle : {false, true}) {
    DataLoader loader(identity_dataset(103), DataLoaderOptions{.batch_size = 10, .shuffle = shuffle, .seed = 4});
    for (int epoch = 0; epoch < 3; ++epoch) {
      auto batches = epoch_batches(loader);
      REQUIRE(batches.size() == 11);
      CHECK(batches.back().size() == 3);
      std::vector<int64_t> all;
      for (auto& b : batches) all.insert(all.end(), b.begin(), b.end());
      std::sort(all.begin(), all.end());
      std::vector<int64_t> expected(103);
      for (int64_t i = 0; i < 103; ++i) expected[static_cast<size_t>(i)] = i;
      CHECK(all == expected);
    }
  }
}

TEST_CASE("drop_last drops the short final batch", "[data]") {
  DataLoader keep(identity_dataset(25), DataLoaderOptions{.batch_size = 10});
  DataLoader drop(identity_dataset(25), DataLoaderOptions{.batch_size = 10, .drop_last = true});
  CHECK(keep.size() == 3);
  CHECK(drop.size() == 2);
  auto batches = epoch_batches(drop);
  REQUIRE(batches.size() == 2);
  CHECK(batches[1] == std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  DataLoader tiny(identity_dataset(5), DataLoaderOptions{.batch_size = 10, .drop_last = true});
  CHECK(epoch_batches(tiny).empty());
}

TEST_CASE("the same seed gives the same order; each epoch a different one", "[data]") {
  DataLoader a(identity_dataset(50), DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 9});
  DataLoader b(identity_dataset(50), DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 9});
  DataLoader c(identity_dataset(50), DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 10});
  auto a0 = epoch_batches(a), a1 = epoch_batches(a);
  CHECK(a0 == epoch_batches(b));
  CHECK(a1 == epoch_batches(b));
  CHECK(a0 != a1);
  CHECK(a0 != epoch_batches(c));
  a.set_epoch(0);
  CHECK(epoch_batches(a) == a0);
  CHECK(a.epoch() == 0);
}

TEST_CASE("worker threads deliver exactly the batches of the single-threaded loader", "[data]") {
  auto ds = identity_dataset(97);
  DataLoader plain(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 3});
  auto e0 = epoch_batches(plain), e1 = epoch_batches(plain);
  for (int workers : {1, 2, 3}) {
    DataLoader threaded(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .num_workers = workers, .seed = 3});
    CHECK(epoch_batches(threaded) == e0);
    CHECK(epoch_batches(threaded) == e1);
    // Leaving an epoch early and starting another must not hang or leak threads.
    for (Batch& b : threaded) {
      (void)b;
      break;
    }
  }
}

TEST_CASE("errors: empty dataset, bad batch size, mismatched tensors, bad index", "[data]") {
  CHECK_THROWS_WITH(TensorDataset(zeros({3, 2}), zeros({4})), Catch::Contains("x has 3 examples") && Catch::Contains("4"));
  CHECK_THROWS_WITH(DataLoader(identity_dataset(3), DataLoaderOptions{.batch_size = 0}), Catch::Contains("batch_size"));
  auto empty_ds = std::make_shared<TensorDataset>(zeros({0, 2}), zeros({0}));
  CHECK_THROWS_WITH(DataLoader(empty_ds, DataLoaderOptions{}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(identity_dataset(3)->get(3), Catch::Contains("index 3 out of range"));
  CHECK_THROWS_WITH(identity_dataset(3)->get_batch({0, 5}), Catch::Contains("index 5 is out of range"));
  CHECK_THROWS_WITH(identity_dataset(3)->get_batch({}), Catch::Contains("empty"));
}

namespace {
// A dataset without a batch fast path, to test the default stacking and worker errors.
struct SquaresDataset : Dataset {
  Example get(int64_t i) const override {
    MINIDL_CHECK(i != 13, "SquaresDataset: example 13 is unlucky");
    return Example{full({2}, static_cast<double>(i * i)), full({}, static_cast<double>(i), DType::Int64)};
  }
  int64_t size() const override { return 20; }
};
}  // namespace

TEST_CASE("default get_batch stacks examples; a worker's error reaches the consumer", "[data]") {
  SquaresDataset ds;
  Batch b = ds.get_batch({2, 3});
  CHECK(b.x.shape() == Shape{2, 2});
  CHECK(b.x.to_vector<float>() == std::vector<float>{4, 4, 9, 9});
  CHECK(b.y.to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  auto shared = std::make_shared<SquaresDataset>();
  DataLoader loader(shared, DataLoaderOptions{.batch_size = 4, .num_workers = 2});
  auto consume = [&] {
    for (Batch& batch : loader) (void)batch;
  };
  CHECK_THROWS_WITH(consume(), Catch::Contains("unlucky"));
}

TEST_CASE("the random classification dataset is seeded and its labels are in range", "[data]") {
  auto a = make_random_classification(100, 10, 3, 42), b = make_random_classification(100, 10, 3, 42);
  CHECK(a->features().shape() == Shape{100, 10});
  CHECK(a->features().to_vector<float>() == b->features().to_vector<float>());
  CHECK(a->labels().dtype() == DType::Int64);
  for (int64_t y : a->labels().to_vector<int64_t>()) REQUIRE((y >= 0 && y < 3));
  CHECK(make_random_classification(100, 10, 3, 43)->features().to_vector<float>() != a->features().to_vector<float>());
  Example e = a->get(7);
  CHECK(e.x.shape() == Shape{10});
  CHECK(e.x.at({3}) == a->features().at({7, 3}));
  CHECK_THROWS_AS(make_random_classification(0, 10, 3, 1), Error);
}
