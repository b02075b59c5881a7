// DataLoader::state / load_state: a loader resumed from a saved position delivers exactly the
// batches the original would have delivered next (shuffled, with and without workers), the
// position rolls over to the next epoch after the last batch, and a state from a differently
// configured loader is refused without changing anything.
#include <catch2/catch.hpp>

#include <vector>

#include "data/data.h"

using namespace minidl;
using namespace minidl::data;

namespace {
std::shared_ptr<TensorDataset> labelled(int64_t n) {
  Tensor ids = arange(n, DType::Int64);
  return std::make_shared<TensorDataset>(ids.to(DType::Float32).unsqueeze(1).contiguous(), ids);
}

// Labels of the batches one begin() .. end() delivers.
std::vector<std::vector<int64_t>> rest_of_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& b : loader) out.push_back(b.y.to_vector<int64_t>());
  return out;
}
}  // namespace

TEST_CASE("a loader resumed mid-epoch delivers the batches the original would have", "[data]") {
  const int workers = GENERATE(0, 2);
  INFO("num_workers = " << workers);
  auto ds = labelled(23);
  const DataLoaderOptions opts{.batch_size = 4, .shuffle = true, .num_workers = workers, .seed = 7};

  // Reference: epochs 0 and 1 straight through.
  DataLoader reference(ds, opts);
  const auto epoch0 = rest_of_epoch(reference), epoch1 = rest_of_epoch(reference);
  REQUIRE(epoch0.size() == 6);

  // Stop epoch 1 after its third batch, save, and resume in a fresh loader.
  DataLoader first(ds, opts);
  rest_of_epoch(first);
  DataLoaderState saved;
  int64_t seen = 0;
  for (Batch& b : first) {
    CHECK(b.y.to_vector<int64_t>() == epoch1[static_cast<size_t>(seen)]);
    if (++seen == 3) {
      saved = first.state();
      break;
    }
  }
  CHECK(saved.epoch == 1);
  CHECK(saved.batch == 3);

  DataLoader resumed(ds, opts);
  resumed.load_state(saved);
  CHECK(resumed.state().epoch == 1);
  CHECK(resumed.state().batch == 3);
  const auto tail = rest_of_epoch(resumed);
  REQUIRE(tail.size() == 3);
  for (size_t i = 0; i < tail.size(); ++i) CHECK(tail[i] == epoch1[3 + i]);
  // The following epoch starts at batch 0 again.
  CHECK(resumed.state().epoch == 2);
  CHECK(resumed.state().batch == 0);
  DataLoader straight(ds, opts);
  straight.set_epoch(2);
  CHECK(rest_of_epoch(resumed) == rest_of_epoch(straight));
}

TEST_CASE("a loader's state is batch 0 of the next epoch before an epoch and after its last batch", "[data]") {
  auto ds = labelled(10);
  DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .seed = 3});
  CHECK(loader.state().epoch == 0);
  CHECK(loader.state().batch == 0);
  auto it = loader.begin();
  CHECK(loader.state().batch == 1);  // batch 0 delivered: once it is used, batch 1 is next
  ++it;
  CHECK(loader.state().epoch == 1);  // the last batch delivered
  CHECK(loader.state().batch == 0);
  CHECK(loader.state().seed == 3);
  CHECK(loader.state().batch_size == 5);
  CHECK(loader.state().dataset_size == 10);
}

TEST_CASE("load_state refuses a state from a loader with other options or data and keeps its position", "[data]") {
  auto ds = labelled(20);
  DataLoader source(ds, {.batch_size = 4, .shuffle = true, .seed = 1});
  source.load_state({.epoch = 3, .batch = 2, .seed = 1, .shuffle = true, .batch_size = 4, .dataset_size = 20});
  DataLoaderState good = source.state();
  CHECK(good.epoch == 3);
  CHECK(good.batch == 2);

  DataLoader target(ds, {.batch_size = 4, .shuffle = true, .seed = 1});
  DataLoaderState bad = good;
  bad.seed = 2;
  CHECK_THROWS_WITH(target.load_state(bad), Catch::Contains("seed 2") && Catch::Contains("seed 1"));
  bad = good;
  bad.batch_size = 5;
  CHECK_THROWS_WITH(target.load_state(bad), Catch::Contains("batch_size 5"));
  bad = good;
  bad.dataset_size = 21;
  CHECK_THROWS_WITH(target.load_state(bad), Catch::Contains("21 examples"));
  bad = good;
  bad.batch = 5;  // 20 / 4 = 5 batches: 0..4
  CHECK_THROWS_WITH(target.load_state(bad), Catch::Contains("batch 5 is out of range"));
  bad = good;
  bad.epoch = -1;
  CHECK_THROWS_WITH(target.load_state(bad), Catch::Contains("negative epoch"));
  CHECK(target.state().epoch == 0);
  CHECK(target.state().batch == 0);
}
