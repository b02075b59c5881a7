// The CPU allocator (core/storage.cpp): 64-byte alignment, blocks of every size reused after a
// free (the per-thread lists up to 1 MiB, the process-wide cache above), a block freed on
// another thread than the one that allocated it, sizes no machine holds, and factories that
// still fill what they promise in reused blocks. Reuse is what the caches are for; under
// AddressSanitizer they are off (a freed block must stay poisoned), so the reuse checks are
// skipped there. That empty_cache(Device::cpu()) gives the blocks back to the system is not
// observable from here: the system may hand out the same block again. memory_stats(cpu) counts
// the blocks (Note [the CPU allocator's counters]).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "core/storage.h"

using namespace minidl;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaches = false;
#else
constexpr bool kCaches = true;
#endif

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

}  // namespace

TEST_CASE("the cpu allocator returns 64-byte aligned, writable blocks of every size", "[storage]") {
  Allocator& a = cpu_allocator();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{65}, size_t{1} << 20, (size_t{1} << 20) + 1,
                       size_t{3} << 20, (size_t{5} << 20) + 12345, size_t{40} << 20}) {
    void* p = a.allocate(bytes);
    REQUIRE(p != nullptr);
    CHECK(aligned(p));
    if (bytes > 0) std::memset(p, 0x5a, bytes);  // the whole block is there (ASan would see an overrun)
    a.deallocate(p, bytes);
  }
}

TEST_CASE("the cpu allocator reuses a freed block of the same size class, small or large", "[storage]") {
  if (!kCaches) return;  // Note [the CPU block cache]: off under AddressSanitizer
  Allocator& a = cpu_allocator();
  empty_cache(Device::cpu());
  for (size_t bytes : {size_t{100}, size_t{1} << 20, (size_t{1} << 20) + 1, size_t{14} << 20}) {
    INFO("bytes " << bytes);
    void* p = a.allocate(bytes);
    std::memset(p, 0xa5, bytes);
    a.deallocate(p, bytes);
    void* q = a.allocate(bytes);
    CHECK(q == p);
    // The same block, not a fresh mapping at the same address (the system hands those out zeroed).
    const auto* bytes_of_q = static_cast<const unsigned char*>(q);
    CHECK((bytes_of_q[0] == 0xa5 && bytes_of_q[bytes - 1] == 0xa5));
    a.deallocate(q, bytes);
  }
  // Sizes of one class share blocks: above 1 MiB a class spans 1/8 of an octave (here 512 KiB).
  void* p = a.allocate((size_t{4} << 20) + 1);
  a.deallocate(p, (size_t{4} << 20) + 1);
  void* q = a.allocate((size_t{4} << 20) + (size_t{512} << 10));
  CHECK(q == p);
  std::memset(q, 1, (size_t{4} << 20) + (size_t{512} << 10));
  a.deallocate(q, (size_t{4} << 20) + (size_t{512} << 10));
  empty_cache(Device::cpu());
}

TEST_CASE("sizes no machine can hold are errors, not a hang or a wrapped size", "[storage]") {
  Allocator& a = cpu_allocator();
  for (size_t bytes : {(size_t{1} << 63) + 12345, SIZE_MAX}) {  // above PTRDIFF_MAX: refused before asking the system
    INFO("bytes " << bytes);
    CHECK_THROWS_AS(a.allocate(bytes), OutOfMemory);
  }
  // 2^31 x 2^31 float32 is 2^64 bytes: refused by name instead of wrapping to an empty block.
  CHECK_THROWS_WITH(empty({int64_t{1} << 31, int64_t{1} << 31}), Catch::Contains("empty") &&
                                                                   Catch::Contains("more than 2^63 bytes"));
  CHECK_THROWS_AS(empty({int64_t{1} << 60}, DType::Float64), Error);
}

TEST_CASE("a large cpu block freed on another thread is reused by the allocating one", "[storage]") {
  if (!kCaches) return;
  Allocator& a = cpu_allocator();
  empty_cache(Device::cpu());
  const size_t bytes = size_t{6} << 20;
  void* p = a.allocate(bytes);
  std::memset(p, 0xa5, bytes);
  std::thread([&] { a.deallocate(p, bytes); }).join();
  void* q = a.allocate(bytes);
  CHECK(q == p);
  const auto* bytes_of_q = static_cast<const unsigned char*>(q);  // the cached block itself, not a fresh mapping
  CHECK((bytes_of_q[0] == 0xa5 && bytes_of_q[bytes - 1] == 0xa5));
  a.deallocate(q, bytes);
  empty_cache(Device::cpu());
}

TEST_CASE("tensors of a CNN's sizes keep their values across reuse of cached blocks", "[storage]") {
  // A freed activation's block comes back for the next one: its old contents must never show
  // through a factory that promises values.
  for (int round = 0; round < 3; ++round) {
    Tensor x = full({64, 32, 28, 28}, 2.0 + round);  // 6.1 MiB
    Tensor z = zeros({64, 32, 28, 28});
    const float* px = x.data<float>();
    const float* pz = z.data<float>();
    bool ok = true;
    for (int64_t i = 0; i < x.numel(); i += 4097) ok = ok && px[i] == 2.0f + static_cast<float>(round) && pz[i] == 0.0f;
    CHECK(ok);
  }
  empty_cache(Device::cpu());
}

TEST_CASE("memory_stats(cpu) counts live blocks, cached blocks, the peak and the cache hits", "[storage]") {
  // Counted by block: a small request by its power-of-two class (1000 bytes: a 1 KiB block), a
  // large one by its class of 1/8 of its octave (3 MiB + 5 bytes: at most 1/8 more), or without
  // the caches rounded to the 64-byte alignment. The bounds below hold for every rule.
  const Device cpu = Device::cpu();
  Allocator& a = cpu_allocator();
  const size_t small = 1000, large = (size_t{3} << 20) + 5;
  reset_peak_memory_stats(cpu);
  const MemoryStats s0 = memory_stats(cpu);
  CHECK(s0.peak_allocated_bytes == s0.allocated_bytes);
  CHECK(s0.reserved_bytes >= s0.allocated_bytes);

  void* p = a.allocate(small);
  void* q = a.allocate(large);
  const MemoryStats s1 = memory_stats(cpu);
  const int64_t blocks = s1.allocated_bytes - s0.allocated_bytes;
  CHECK(blocks >= static_cast<int64_t>(small + large));
  CHECK(blocks <= static_cast<int64_t>(1024 + large + large / 8 + 64));
  CHECK(s1.peak_allocated_bytes == s1.allocated_bytes);
  CHECK(s1.reserved_bytes >= s1.allocated_bytes);
  a.deallocate(q, large);
  a.deallocate(p, small);
  const MemoryStats s2 = memory_stats(cpu);
  CHECK(s2.allocated_bytes == s0.allocated_bytes);
  CHECK(s2.peak_allocated_bytes == s1.peak_allocated_bytes);  // the peak stays until reset
  if (kCaches) {
    CHECK(s2.reserved_bytes == s1.reserved_bytes);  // both blocks wait in the caches
  } else {
    CHECK(s2.reserved_bytes == s1.reserved_bytes - blocks);  // both went back to the system
  }

  // The same requests again: served by the caches (no system allocation), or by the system.
  p = a.allocate(small);
  q = a.allocate(large);
  const MemoryStats s3 = memory_stats(cpu);
  CHECK(s3.cache_hits - s2.cache_hits == (kCaches ? 2 : 0));
  CHECK(s3.device_allocations - s2.device_allocations == (kCaches ? 0 : 2));
  a.deallocate(q, large);
  a.deallocate(p, small);
  reset_peak_memory_stats(cpu);
  CHECK(memory_stats(cpu).peak_allocated_bytes == memory_stats(cpu).allocated_bytes);
}
