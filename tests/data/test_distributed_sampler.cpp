// data::DistributedSampler: disjoint shards that cover the dataset, equal lengths (padded or
// cut), and orders that change between epochs only through the epoch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "data/distributed_sampler.h"

using namespace minidl;
using data::DistributedSampler;
using data::DistributedSamplerOptions;

namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int world, DistributedSamplerOptions options, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) out.push_back(DistributedSampler(n, world, r, options).indices(epoch));
  return out;
}

}  // namespace

TEST_CASE("distributed sampler shards are disjoint, cover the data and have equal lengths", "[data][sampler]") {
  for (bool shuffle : {false, true})
    for (int world : {1, 2, 3, 4, 7})
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{12}, int64_t{13}, int64_t{100}}) {
        INFO("shuffle " << shuffle << ", world " << world << ", n " << n);
        const auto s = shards(n, world, {.shuffle = shuffle, .seed = 3}, 0);
        const int64_t per_rank = (n + world - 1) / world;
        std::multiset<int64_t> all;
        for (const auto& shard : s) {
          CHECK(static_cast<int64_t>(shard.size()) == per_rank);
          all.insert(shard.begin(), shard.end());
        }
        std::set<int64_t> distinct(all.begin(), all.end());
        CHECK(static_cast<int64_t>(distinct.size()) == n);  // every example, none outside 0..n-1
        CHECK(*distinct.begin() == 0);
        CHECK(*distinct.rbegin() == n - 1);
        // Padding repeats exactly total - n examples (the first ones of the order).
        CHECK(static_cast<int64_t>(all.size()) - n == per_rank * world - n);
        if (n % world == 0) CHECK(all.size() == distinct.size());  // no padding: disjoint
      }
}

TEST_CASE("distributed sampler with drop_last cuts the tail to equal disjoint shards", "[data][sampler]") {
  for (int world : {2, 3, 5}) {
    const int64_t n = 17;
    const auto s = shards(n, world, {.shuffle = true, .seed = 1, .drop_last = true}, 2);
    std::set<int64_t> all;
    for (const auto& shard : s) {
      CHECK(static_cast<int64_t>(shard.size()) == n / world);
      all.insert(shard.begin(), shard.end());
    }
    CHECK(static_cast<int64_t>(all.size()) == n / world * world);  // disjoint: no index twice
  }
  CHECK_THROWS_WITH(DistributedSampler(2, 3, 0, {.drop_last = true}), Catch::Contains("leave every rank with none"));
}

TEST_CASE("distributed sampler orders change with the epoch only, the same way on every rank", "[data][sampler]") {
  DistributedSampler a(50, 3, 1, {.seed = 9}), b(50, 3, 1, {.seed = 9});
  CHECK(a.indices(0) == b.indices(0));  // same (seed, epoch): same shard, on any process
  CHECK(a.indices(0) != a.indices(1));  // a new epoch reshuffles
  a.set_epoch(4);
  CHECK(a.indices() == b.indices(4));
  CHECK(a.indices() == a.indices());  // nothing but the epoch changes it
  // The shards of one epoch come from one order: together they are disjoint for every epoch.
  for (int64_t epoch : {0, 1, 5}) {
    std::set<int64_t> all;
    for (int r = 0; r < 3; ++r) {
      const auto shard = DistributedSampler(51, 3, r, {.seed = 9}).indices(epoch);
      all.insert(shard.begin(), shard.end());
    }
    CHECK(all.size() == 51);
  }
  // Unshuffled: rank r takes r, r + W, ... (PyTorch's layout).
  CHECK(DistributedSampler(7, 3, 1, {.shuffle = false}).indices(0) == std::vector<int64_t>{1, 4, 0});
}

TEST_CASE("distributed sampler rejects a bad rank or world size", "[data][sampler]") {
  CHECK_THROWS_WITH(DistributedSampler(10, 2, 2), Catch::Contains("rank 2 is out of range for world size 2"));
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), Catch::Contains("world size must be at least 1"));
  CHECK_THROWS_WITH(DistributedSampler(10, 2, -1), Catch::Contains("rank -1 is out of range"));
}
