// DataLoader and samplers: coverage of every index, drop_last, seeded shuffling that is the
// same across runs and different across epochs, epoch counting, and workers that change
// nothing but speed (same batches, errors rethrown on the consumer, clean early exits).
#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <thread>

#include "core/start_thread.h"
#include "data/data.h"
#include "tests/error_message.h"

using namespace minidl;
using namespace minidl::data;

namespace {
// x[i] = [i, i], y[i] = i: a batch tells exactly which examples it holds.
std::shared_ptr<TensorDataset> identity_dataset(int64_t n) {
  Tensor ids = arange(n, DType::Int64);
  Tensor x = ids.to(DType::Float32).unsqueeze(1).expand({n, 2}).contiguous();
  return std::make_shared<TensorDataset>(x, ids);
}

// The labels of each batch of one epoch (one begin() .. end()), checking x agrees with y.
std::vector<std::vector<int64_t>> epoch_batches(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader) {
    REQUIRE(b.x.shape() == Shape{b.y.shape()[0], 2});
    std::vector<int64_t> ids = b.y.to_vector<int64_t>();
    std::vector<float> xs = b.x.to_vector<float>();
    for (size_t k = 0; k < ids.size(); ++k) REQUIRE(xs[2 * k] == static_cast<float>(ids[k]));
    out.push_back(std::move(ids));
  }
  return out;
}

std::vector<int64_t> iota_vector(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

// Fails on example 13, to test that errors reach the consumer.
struct UnluckyDataset : Dataset {
  Example get(int64_t i) const override {
    MINIDL_CHECK(i != 13, "UnluckyDataset: example 13 is unlucky");
    return Example{full({2}, static_cast<double>(i)), full({}, static_cast<double>(i), DType::Int64)};
  }
  int64_t size() const override { return 20; }
};

// Slow examples, so that a loader is destroyed while its workers are mid-batch.
struct SlowDataset : Dataset {
  Example get(int64_t i) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return Example{full({2}, static_cast<double>(i)), full({}, static_cast<double>(i), DType::Int64)};
  }
  int64_t size() const override { return 200; }
};
}  // namespace

TEST_CASE("samplers: sequential is 0..n-1, random is a seeded permutation per epoch", "[data]") {
  CHECK(SequentialSampler(5).indices(0) == iota_vector(5));
  CHECK(SequentialSampler(5).indices(3) == iota_vector(5));
  RandomSampler a(64, 11), b(64, 11);
  std::vector<int64_t> e0 = a.indices(0), e1 = a.indices(1);
  CHECK(e0 == b.indices(0));  // same (seed, epoch), same order
  CHECK(e0 == a.indices(0));  // asking again does not advance anything
  CHECK(e0 != e1);
  CHECK(e0 != RandomSampler(64, 12).indices(0));
  CHECK(e0 != iota_vector(64));
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  CHECK(e0 == iota_vector(64));
  CHECK(e1 == iota_vector(64));
  CHECK(RandomSampler(1, 0).indices(5) == std::vector<int64_t>{0});
  CHECK_THROWS_AS(RandomSampler(-1, 0), Error);
}

TEST_CASE("every index appears exactly once per epoch, shuffled or not", "[data]") {
  for (bool shuffle : {false, true}) {
    DataLoader loader(identity_dataset(103), DataLoaderOptions{.batch_size = 10, .shuffle = shuffle, .seed = 4});
    for (int epoch = 0; epoch < 3; ++epoch) {
      auto batches = epoch_batches(loader);
      REQUIRE(batches.size() == 11);
      for (size_t k = 0; k + 1 < batches.size(); ++k) CHECK(batches[k].size() == 10);
      CHECK(batches.back().size() == 3);
      std::vector<int64_t> all;
      for (auto& b : batches) all.insert(all.end(), b.begin(), b.end());
      if (!shuffle) CHECK(all == iota_vector(103));
      std::sort(all.begin(), all.end());
      CHECK(all == iota_vector(103));
    }
  }
}

TEST_CASE("drop_last decides whether the short final batch is kept", "[data]") {
  DataLoader keep(identity_dataset(25), DataLoaderOptions{.batch_size = 10});
  DataLoader drop(identity_dataset(25), DataLoaderOptions{.batch_size = 10, .drop_last = true});
  CHECK(keep.size() == 3);
  CHECK(drop.size() == 2);
  auto kept = epoch_batches(keep);
  REQUIRE(kept.size() == 3);
  CHECK(kept[2] == std::vector<int64_t>{20, 21, 22, 23, 24});
  auto dropped = epoch_batches(drop);
  REQUIRE(dropped.size() == 2);
  CHECK(dropped[1] == std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  // An exact multiple loses nothing either way.
  DataLoader exact(identity_dataset(30), DataLoaderOptions{.batch_size = 10, .drop_last = true});
  CHECK(epoch_batches(exact).size() == 3);
  // A batch larger than the dataset: one short batch, or none with drop_last.
  DataLoader big(identity_dataset(5), DataLoaderOptions{.batch_size = 10});
  auto one = epoch_batches(big);
  REQUIRE(one.size() == 1);
  CHECK(one[0].size() == 5);
  DataLoader tiny(identity_dataset(5), DataLoaderOptions{.batch_size = 10, .drop_last = true});
  CHECK(tiny.size() == 0);
  CHECK(epoch_batches(tiny).empty());
}

TEST_CASE("a batch size up to INT64_MAX gives one batch of the whole dataset, as in PyTorch", "[data]") {
  // (n + b - 1) / b overflowed for b near INT64_MAX: the loader delivered no batch at all.
  const int64_t n = 7;
  for (int64_t b : {n, n + 1, int64_t{1} << 62, std::numeric_limits<int64_t>::max() - 1,
                    std::numeric_limits<int64_t>::max()}) {
    for (int workers : {0, 2}) {
      INFO("batch_size " << b << ", " << workers << " workers");
      DataLoader loader(identity_dataset(n), DataLoaderOptions{.batch_size = b, .shuffle = true, .num_workers = workers});
      CHECK(loader.size() == 1);
      auto batches = epoch_batches(loader);
      REQUIRE(batches.size() == 1);
      std::sort(batches[0].begin(), batches[0].end());
      CHECK(batches[0] == iota_vector(n));
      DataLoader dropping(identity_dataset(n), DataLoaderOptions{.batch_size = b, .drop_last = b > n});
      CHECK(dropping.size() == (b > n ? 0 : 1));
    }
  }
}

TEST_CASE("a shuffled epoch past the random streams' range is an error, not a repeat of epoch 0", "[data]") {
  // Epoch e draws from Philox counters starting at e << 40: from epoch 2^24 on they would wrap
  // onto the streams of earlier epochs.
  RandomSampler sampler(10, 3);
  CHECK(sampler.indices((int64_t{1} << 24) - 1).size() == 10);
  CHECK_THROWS_WITH(sampler.indices(int64_t{1} << 24), Catch::Contains("epoch 16777216") && Catch::Contains("16777215"));
  CHECK_THROWS_WITH(sampler.indices(-1), Catch::Contains("epoch -1"));
}

TEST_CASE("the same seed gives the same order in two loaders, and each epoch a different one", "[data]") {
  DataLoader a(identity_dataset(50), DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 9});
  DataLoader b(identity_dataset(50), DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 9});
  DataLoader c(identity_dataset(50), DataLoaderOptions{.batch_size = 7, .shuffle = true, .seed = 10});
  auto a0 = epoch_batches(a), a1 = epoch_batches(a), a2 = epoch_batches(a);
  CHECK(a0 == epoch_batches(b));
  CHECK(a1 == epoch_batches(b));
  CHECK(a0 != a1);
  CHECK(a1 != a2);
  CHECK(a0 != epoch_batches(c));
}

TEST_CASE("each begin() starts the next epoch and set_epoch chooses the next one", "[data]") {
  DataLoader loader(identity_dataset(40), DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 2});
  CHECK(loader.epoch() == -1);
  auto e0 = epoch_batches(loader);
  CHECK(loader.epoch() == 0);
  auto e1 = epoch_batches(loader);
  CHECK(loader.epoch() == 1);
  // Leaving an epoch early still counts it as started.
  for (Batch& b : loader) {
    (void)b;
    break;
  }
  CHECK(loader.epoch() == 2);
  loader.set_epoch(1);
  CHECK(loader.epoch() == 2);  // set_epoch affects the next begin(), not the one running
  CHECK(epoch_batches(loader) == e1);
  CHECK(loader.epoch() == 1);
  loader.set_epoch(0);
  CHECK(epoch_batches(loader) == e0);
  // The loader's epoch e is the sampler's epoch e.
  RandomSampler sampler(40, 2);
  std::vector<int64_t> flat;
  for (auto& b : e1) flat.insert(flat.end(), b.begin(), b.end());
  CHECK(flat == sampler.indices(1));
}

TEST_CASE("worker threads deliver exactly the batches of the single-threaded loader", "[data]") {
  auto ds = identity_dataset(97);
  for (bool drop_last : {false, true}) {
    DataLoader plain(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .drop_last = drop_last, .seed = 3});
    auto e0 = epoch_batches(plain), e1 = epoch_batches(plain);
    for (int workers : {1, 2, 3}) {
      DataLoader threaded(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .drop_last = drop_last,
                                                .num_workers = workers, .seed = 3});
      CHECK(epoch_batches(threaded) == e0);
      CHECK(epoch_batches(threaded) == e1);
      // Leaving an epoch early and starting another must not hang or leak threads.
      for (Batch& b : threaded) {
        (void)b;
        break;
      }
      CHECK(epoch_batches(threaded).size() == e0.size());
    }
  }
}

TEST_CASE("a worker thread the system refuses is a minidl::Error and the loader keeps its position", "[data]") {
  auto ds = identity_dataset(40);
  DataLoader plain(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .seed = 5});
  const auto e0 = epoch_batches(plain);
  DataLoader threaded(ds, DataLoaderOptions{.batch_size = 8, .shuffle = true, .num_workers = 3, .seed = 5});
  minidl::testing::fail_thread_starts_after(1);  // worker 0 starts, worker 1 is refused
  const std::string message = minidl::testing::error_message([&] { threaded.begin(); });
  minidl::testing::fail_thread_starts_after(-1);
  CHECK_THAT(message, Catch::Contains("DataLoader: worker 1 of 3") && Catch::Contains("cannot start a thread"));
  CHECK(threaded.epoch() == -1);              // no epoch began
  CHECK(epoch_batches(threaded) == e0);       // the next begin() is epoch 0, complete
}

TEST_CASE("a loader starts no more workers than an epoch has batches left", "[data]") {
  // 3 batches: with 1000 workers asked, only 3 threads are started (a refused 4th start would throw).
  DataLoader loader(identity_dataset(24), DataLoaderOptions{.batch_size = 8, .num_workers = 1000});
  minidl::testing::fail_thread_starts_after(3);
  std::vector<std::vector<int64_t>> batches;
  const std::string message = minidl::testing::error_message([&] { batches = epoch_batches(loader); });
  minidl::testing::fail_thread_starts_after(-1);
  CHECK(message == "<no minidl::Error was thrown>");
  CHECK(batches.size() == 3);
}

TEST_CASE("a worker's error is rethrown on the consuming thread, in batch order", "[data]") {
  auto ds = std::make_shared<UnluckyDataset>();
  for (int workers : {0, 1, 3}) {
    DataLoader loader(ds, DataLoaderOptions{.batch_size = 4, .num_workers = workers});
    std::vector<int64_t> seen;
    auto consume = [&] {
      for (Batch& batch : loader) seen.push_back(batch.y.to_vector<int64_t>().front());
    };
    CHECK_THROWS_WITH(consume(), Catch::Contains("unlucky"));
    // Batches 0..2 (examples 0..11) arrived before batch 3 (examples 12..15) failed.
    CHECK(seen == std::vector<int64_t>{0, 4, 8});
    CHECK_THROWS_WITH(consume(), Catch::Contains("unlucky"));  // the loader stays usable
  }
}

TEST_CASE("destroying a loader mid-epoch joins its workers", "[data]") {
  auto ds = std::make_shared<SlowDataset>();
  for (int workers : {1, 4}) {
    auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = 4, .num_workers = workers});
    int taken = 0;
    for (Batch& b : *loader) {
      CHECK(b.y.to_vector<int64_t>().front() == 4 * taken);
      if (++taken == 2) break;
    }
    loader.reset();  // workers are parked or mid-batch; this must return, not hang or crash
    CHECK(taken == 2);
  }
}

TEST_CASE("loader errors: null or empty dataset, non-positive batch size, negative workers", "[data]") {
  CHECK_THROWS_WITH(DataLoader(identity_dataset(3), DataLoaderOptions{.batch_size = 0}),
                    Catch::Contains("batch_size must be positive, got 0"));
  CHECK_THROWS_WITH(DataLoader(identity_dataset(3), DataLoaderOptions{.batch_size = -2}),
                    Catch::Contains("batch_size"));
  CHECK_THROWS_WITH(DataLoader(identity_dataset(3), DataLoaderOptions{.num_workers = -1}),
                    Catch::Contains("num_workers"));
  auto empty_ds = std::make_shared<TensorDataset>(zeros({0, 2}), zeros({0}));
  CHECK_THROWS_WITH(DataLoader(empty_ds, DataLoaderOptions{}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(DataLoader(nullptr, DataLoaderOptions{}), Catch::Contains("null"));
}

TEST_CASE("DataLoader pin_memory is a clear error without CUDA and accepted with it", "[data]") {
  const DataLoaderOptions pinned{.batch_size = 2, .pin_memory = true};
  if (cuda_is_available()) {
    CHECK_NOTHROW(DataLoader(identity_dataset(5), pinned));  // the batches themselves: tests/cuda
  } else {
    CHECK_THROWS_WITH(DataLoader(identity_dataset(5), pinned), Catch::Contains("pin_memory=true needs a CUDA device"));
  }
}
