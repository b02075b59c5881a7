// core/host_parallel.h on the CPU kernels' pool (kernels/cpu/host_parallel.cpp): the slices
// cover [0, n) exactly once, each holds at least `grain` items, there is one per thread at most,
// a short loop is one slice on the calling thread, and an exception reaches the caller.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/host_parallel.h"
#include "kernels/cpu/thread_pool.h"

using namespace minidl;

namespace {

// The slices of one host_parallel_for call, sorted by begin.
std::vector<std::pair<int64_t, int64_t>> slices_of(int64_t n, int64_t grain) {
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> slices;
  host_parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mutex);
    slices.emplace_back(begin, end);
  });
  std::sort(slices.begin(), slices.end());
  return slices;
}

}  // namespace

TEST_CASE("host_parallel_for covers the range once, in slices of at least grain, one per thread at most", "[kernels][thread-pool]") {
  const int threads = host_threads();
  CHECK(threads == cpu::ThreadPool::instance().max_threads());
  for (int64_t n : {int64_t{1000}, int64_t{1999}, int64_t{2000}, int64_t{10007}, int64_t{1000000}}) {
    INFO("n = " << n << ", threads = " << threads);
    const auto slices = slices_of(n, 1000);
    REQUIRE(!slices.empty());
    CHECK(static_cast<int64_t>(slices.size()) == std::min<int64_t>(threads, n / 1000));
    CHECK(slices.front().first == 0);
    CHECK(slices.back().second == n);
    for (size_t i = 0; i < slices.size(); ++i) {
      CHECK(slices[i].second - slices[i].first >= 1000);
      if (i > 0) CHECK(slices[i].first == slices[i - 1].second);  // no gap, no overlap
    }
  }
}

TEST_CASE("host_parallel_for runs a short loop as one slice on the calling thread, and nothing for n = 0", "[kernels][thread-pool]") {
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  host_parallel_for(1999, 1000, [&](int64_t begin, int64_t end) {
    ++calls;
    CHECK(begin == 0);
    CHECK(end == 1999);
    CHECK(std::this_thread::get_id() == caller);
  });
  CHECK(calls == 1);
  host_parallel_for(0, 1000, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 1);
  // grain 0 counts as 1: five items make min(5, threads) slices.
  CHECK(slices_of(5, 0).size() == static_cast<size_t>(std::min(5, host_threads())));
}

TEST_CASE("host_parallel_for rethrows a slice's exception and works afterwards", "[kernels][thread-pool]") {
  CHECK_THROWS_WITH(host_parallel_for(1 << 20, 1, [](int64_t begin, int64_t) {
                      if (begin == 0) throw std::runtime_error("slice 0 failed");
                    }),
                    "slice 0 failed");
  std::vector<int> seen(4096, 0);
  host_parallel_for(4096, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)] += 1;
  });
  CHECK(std::count(seen.begin(), seen.end(), 1) == 4096);
}
