// The CUDA caching allocator's logic on a fake device (it is plain C++ over
// DeviceMemorySource, so CI tests it without a GPU): size classes, reuse without a device
// call, statistics, the retry after emptying the cache, OutOfMemory, and stream-aware frees.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>

#include "core/error.h"
#include "kernels/cuda/caching_allocator.h"

using namespace minidl;
using minidl::cuda::CachingAllocator;

namespace {

// A device with `capacity` bytes; counts calls; events complete when told to.
struct FakeDevice final : cuda::DeviceMemorySource {
  size_t capacity, used = 0;
  int mallocs = 0, frees = 0;
  std::map<void*, size_t> blocks;
  std::map<uint64_t, bool> events;  // id -> completed
  uint64_t next_event = 1;
  explicit FakeDevice(size_t cap) : capacity(cap) {}
  Device device() const override { return Device::cuda(3); }
  void* try_allocate(size_t bytes) override {
    if (used + bytes > capacity) return nullptr;
    ++mallocs;
    used += bytes;
    void* p = std::malloc(bytes);
    blocks[p] = bytes;
    return p;
  }
  void release(void* p) noexcept override {
    ++frees;
    used -= blocks[p];
    blocks.erase(p);
    std::free(p);
  }
  void memory_info(size_t& f, size_t& t) noexcept override {
    f = capacity - used;
    t = capacity;
  }
  uint64_t record_event(void*) override {
    events[next_event] = false;
    return next_event++;
  }
  bool event_completed(uint64_t e) override { return events.at(e); }
  void destroy_event(uint64_t e) noexcept override { events.erase(e); }
};

struct Fixture {
  FakeDevice* device;
  CachingAllocator allocator;
  explicit Fixture(size_t capacity)
      : device(new FakeDevice(capacity)), allocator(std::unique_ptr<cuda::DeviceMemorySource>(device)) {}
};

}  // namespace

TEST_CASE("caching allocator size classes round up by at most an eighth above 8 MiB", "[kernels][allocator]") {
  CHECK(CachingAllocator::size_class(0) == 512);
  CHECK(CachingAllocator::size_class(1) == 512);
  CHECK(CachingAllocator::size_class(513) == 1024);
  CHECK(CachingAllocator::size_class(1 << 20) == (1 << 20));
  CHECK(CachingAllocator::size_class((1 << 20) + 1) == (2 << 20));
  for (size_t bytes : {size_t{9} << 20, size_t{100} << 20, (size_t{1} << 33) + 12345}) {
    const size_t c = CachingAllocator::size_class(bytes);
    CHECK(c >= bytes);
    CHECK(static_cast<double>(c - bytes) <= static_cast<double>(bytes) / 8.0);
  }
}

TEST_CASE("caching allocator serves a freed block again without a device allocation", "[kernels][allocator]") {
  Fixture f(64 << 20);
  void* a = f.allocator.allocate(1000);
  f.allocator.deallocate(a, 1000);
  void* b = f.allocator.allocate(900);  // same 1024-byte class
  CHECK(b == a);
  CHECK(f.device->mallocs == 1);
  const MemoryStats s = f.allocator.stats();
  CHECK(s.cache_hits == 1);
  CHECK(s.device_allocations == 1);
  CHECK(s.allocated_bytes == 1024);
  CHECK(s.reserved_bytes == 1024);
  void* c = f.allocator.allocate(5000);  // another class: a new block
  CHECK(c != b);
  CHECK(f.allocator.stats().peak_allocated_bytes == 1024 + 5120);
  f.allocator.deallocate(b, 900);
  f.allocator.deallocate(c, 5000);
  CHECK(f.allocator.stats().allocated_bytes == 0);
  f.allocator.reset_peak();
  CHECK(f.allocator.stats().peak_allocated_bytes == 0);
  f.allocator.empty_cache();
  CHECK(f.allocator.stats().reserved_bytes == 0);
  CHECK(f.device->used == 0);
}

TEST_CASE("caching allocator empties its cache and retries before running out of memory", "[kernels][allocator]") {
  Fixture f(4 << 20);
  void* a = f.allocator.allocate(3 << 20);
  f.allocator.deallocate(a, 3 << 20);  // cached: the fake device now has 1 MiB free
  void* b = f.allocator.allocate(2 << 20);  // needs the cached block back
  CHECK(b != nullptr);
  CHECK(f.allocator.stats().cache_flushes == 1);
  CHECK(f.allocator.stats().reserved_bytes == (2 << 20));
  f.allocator.deallocate(b, 2 << 20);
}

TEST_CASE("caching allocator OutOfMemory names the request, the device and what the cache holds", "[kernels][allocator]") {
  Fixture f(4 << 20);
  void* keep = f.allocator.allocate(1 << 20);
  try {
    f.allocator.allocate(8 << 20);
    FAIL("allocation beyond capacity succeeded");
  } catch (const OutOfMemory& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("cuda:3") && Catch::Contains("8388608 bytes") && Catch::Contains("free of 4 MiB") &&
                        Catch::Contains("1 MiB in live tensors") && Catch::Contains("nothing was cached to free"));
  }
  CHECK(f.allocator.stats().cache_flushes == 0);  // nothing to flush: no retry
  void* small = f.allocator.allocate(100);  // still usable after the error
  CHECK(small != nullptr);
  f.allocator.deallocate(small, 100);
  f.allocator.deallocate(keep, 1 << 20);
}

TEST_CASE("a block used on another stream is reused only after that stream's event completes", "[kernels][allocator]") {
  Fixture f(64 << 20);
  int other_stream = 0;
  void* a = f.allocator.allocate(4096);
  f.allocator.record_stream(a, &other_stream);
  f.allocator.deallocate(a, 4096);
  REQUIRE(f.device->events.size() == 1);
  void* b = f.allocator.allocate(4096);  // the event is pending: a fresh block
  CHECK(b != a);
  f.device->events.begin()->second = true;  // the other stream is done with a
  void* c = f.allocator.allocate(4096);
  CHECK(c == a);
  CHECK(f.device->events.empty());  // destroyed once collected
  f.allocator.deallocate(b, 4096);
  f.allocator.deallocate(c, 4096);
  CHECK_THROWS_WITH(f.allocator.record_stream(&other_stream, &other_stream), Catch::Contains("not a live block"));
}

TEST_CASE("out of memory frees the blocks other streams are done with, and names the ones they still use",
          "[kernels][allocator]") {
  Fixture f(4 << 20);
  int other_stream = 0;
  void* done = f.allocator.allocate(1 << 20);
  void* busy = f.allocator.allocate(1 << 20);
  f.allocator.record_stream(done, &other_stream);
  f.allocator.record_stream(busy, &other_stream);
  f.allocator.deallocate(done, 1 << 20);
  f.allocator.deallocate(busy, 1 << 20);
  REQUIRE(f.device->events.size() == 2);
  f.device->events.begin()->second = true;  // the stream is past `done`, not past `busy`
  // 3 MiB fit only once `done` goes back to the device; `busy` must stay reserved.
  void* big = f.allocator.allocate(3 << 20);
  CHECK(big != nullptr);
  CHECK(f.allocator.stats().cache_flushes == 1);
  try {
    f.allocator.allocate(1 << 20);  // 3 MiB live + 1 MiB pending: the device is full
    FAIL("allocation beyond capacity succeeded");
  } catch (const OutOfMemory& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("1 freed block(s) still used by other streams") &&
                                          Catch::Contains("nothing was cached to free"));
  }
  f.device->events.begin()->second = true;  // now the stream is past `busy` too
  void* again = f.allocator.allocate(1 << 20);
  CHECK(again == busy);
  f.allocator.deallocate(again, 1 << 20);
  f.allocator.deallocate(big, 3 << 20);
}

TEST_CASE("every allocation is distinct, even of zero bytes", "[kernels][allocator]") {
  Fixture f(64 << 20);
  std::set<void*> seen;
  std::vector<void*> live;
  for (int i = 0; i < 50; ++i) {
    void* p = f.allocator.allocate(static_cast<size_t>(i % 3) * 700);
    CHECK(seen.insert(p).second);
    live.push_back(p);
  }
  for (void* p : live) f.allocator.deallocate(p, 0);
  CHECK(f.allocator.stats().allocated_bytes == 0);
}

TEST_CASE("a graph pool keeps its blocks from the shared cache until it is released", "[kernels][allocator]") {
  // Note [graph pools]: what a capture allocated must never be handed to an eager allocation
  // while the graph lives, even after the tensor holding it was freed.
  Fixture f(1 << 20);
  CachingAllocator& a = f.allocator;
  void* shared_free = a.allocate(1000);
  a.deallocate(shared_free, 1000);  // a cached block of the 1024 class, from before the capture

  const CachingAllocator::PoolId pool = a.new_pool();
  CHECK(pool != 0);
  a.begin_pool(pool);
  void* p1 = a.allocate(1000);  // takes the shared cached block: it becomes the pool's
  CHECK(p1 == shared_free);
  void* p2 = a.allocate(1000);  // a fresh one
  CHECK(p2 != p1);
  CHECK(f.device->mallocs == 2);
  a.deallocate(p1, 1000);       // freed during the capture: back to the pool
  void* p3 = a.allocate(1000);  // reused within the pool
  CHECK(p3 == p1);
  CHECK_THROWS_WITH(a.begin_pool(pool), Catch::Contains("already active"));
  a.end_pool();
  CHECK(a.pool_live_bytes(pool) == 2048);

  a.deallocate(p3, 1000);  // freed after the capture: still the pool's
  CHECK(a.pool_free_bytes(pool) == 1024);
  void* eager = a.allocate(1000);  // an eager allocation cannot get it
  CHECK(eager != p3);
  CHECK(eager != p2);
  CHECK(f.device->mallocs == 3);
  a.empty_cache();  // leaves the pool's free block alone
  CHECK(f.device->blocks.count(p3) == 1);

  a.begin_pool(pool);  // a second capture into the same pool reuses its free block
  void* again = a.allocate(1000);
  CHECK(again == p3);
  a.end_pool();
  a.deallocate(again, 1000);

  a.release_pool(pool);  // the graph is gone: the free block joins the shared cache ...
  CHECK(a.pool_free_bytes(pool) == 0);
  void* after = a.allocate(1000);
  CHECK(after == p3);
  a.deallocate(p2, 1000);  // ... and a block still live then joins it when freed
  void* after2 = a.allocate(1000);
  CHECK(after2 == p2);
  CHECK_THROWS_WITH(a.begin_pool(pool), Catch::Contains("does not exist"));
  a.deallocate(after, 1000);
  a.deallocate(after2, 1000);
  a.deallocate(eager, 1000);
  CHECK(a.stats().allocated_bytes == 0);
}
