// CPU allocator and Storage construction.
#include "core/storage.h"

#include <cstdint>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "core/error.h"
#include "core/profiler.h"

namespace minidl {
namespace {

constexpr size_t kAlignment = 64;

// Note [the CPU block cache]
// Small training steps allocate and free dozens of tiny tensors; aligned_alloc goes through
// glibc's memalign path, which costs more than the seed model's arithmetic. Blocks up to
// 1 MiB are rounded to a power of two and kept on a per-thread free list (at most
// kBlocksPerClass each), so steady-state steps do not call malloc at all. A block freed on
// another thread joins that thread's lists. A block freed onto a full list spills into the
// process-wide cache of Note [large CPU blocks are cached too], under its power-of-two size (a key
// no large block has: those are all above 1 MiB), and an allocation whose list is empty looks
// there before it asks the system. A deep model keeps more than kBlocksPerClass activations of
// one size alive at once (the char-GPT at 6 layers, about 50 of 16 KiB): before the spill, each
// step gave the surplus back to the system and asked for it again, 34 system allocations a step.
//
// Note [large CPU blocks are cached too]
// glibc serves a block above its mmap threshold with a fresh mmap and returns it to the kernel
// on free, so every page of it faults on first touch — about as long as writing the page. glibc
// raises that threshold after such a free, but only up to 32 MiB, and a program's first steps
// pay in full. A CNN step allocates activations and im2col buffers of 1-15 MiB each (an
// evaluation batch of 1000, over 100 MiB): bench_conv's second convolution, which allocates its
// 14 MiB col buffer on every call, took three times its GEMM's time before this cache and 1.0 to
// 1.6 times after. So blocks above 1 MiB are kept too, in one process-wide cache (any thread may free
// a block that another allocated; a mutex is cheap at a few large blocks per layer), by size
// class — eight classes per power of two, so a block wastes at most 1/8 — up to
// kLargeCacheBytes in all; a block that does not fit goes back to the system, and an allocation
// the system refuses is retried once after the cache has returned everything it holds.
// empty_cache(Device::cpu()) returns them. Under AddressSanitizer both caches are off, so that
// a use after free is still caught.
//
// Note [the CPU allocator's counters]
// Relaxed atomic counters, updated by every allocation and free, give the CPU what the CUDA
// caching allocator reports (memory_stats): `allocated` counts each live block by its size class
// (what it occupies), `reserved` adds the cached blocks (what the process holds from the system
// for tensors), `peak` is the largest `allocated` seen. So a training step's tensor peak can be
// told apart from what the caches add to the resident memory the operating system reports.
// A few atomic adds per tensor are noise beside the allocation itself. The counters are read one
// by one, so a reader racing other threads' allocations may see `allocated` briefly above
// `reserved`; they are statistics, not a lock.
struct Counters {
  std::atomic<int64_t> allocated{0}, reserved{0}, peak{0};
  std::atomic<int64_t> system_allocations{0}, cache_hits{0}, cache_flushes{0};

  void add_live(int64_t bytes) {
    const int64_t now = allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
};
Counters& counters() {
  static auto* c = new Counters;  // never destroyed: tensors may be freed during exit (as below)
  return *c;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUseBlockCache = false;
#else
constexpr bool kUseBlockCache = true;
#endif
class BlockCache {
 public:
  static constexpr int kMinClass = 6;   // 64 bytes
  static constexpr int kMaxClass = 20;  // 1 MiB
  static constexpr size_t kBlocksPerClass = 32;

  static int size_class(size_t bytes) {
    int c = kMinClass;
    while ((size_t{1} << c) < bytes) ++c;
    return c;
  }

  void* take(int c) {
    auto& list = lists_[c - kMinClass];
    if (list.count == 0) return nullptr;
    return list.blocks[--list.count];
  }
  bool give(int c, void* p) {
    auto& list = lists_[c - kMinClass];
    if (list.count == kBlocksPerClass) return false;
    list.blocks[list.count++] = p;
    return true;
  }
  ~BlockCache() {
    alive = false;
    for (int c = kMinClass; c <= kMaxClass; ++c) {
      auto& list = lists_[c - kMinClass];
      for (size_t i = 0; i < list.count; ++i) std::free(list.blocks[i]);
      counters().reserved.fetch_sub(static_cast<int64_t>(list.count) << c, std::memory_order_relaxed);
    }
  }

  static thread_local bool alive;  // false once this thread's cache is destroyed

 private:
  struct List {
    void* blocks[kBlocksPerClass];
    size_t count = 0;
  };
  List lists_[kMaxClass - kMinClass + 1];
};
thread_local bool BlockCache::alive = true;

BlockCache& block_cache() {
  static thread_local BlockCache cache;
  return cache;
}

class LargeBlockCache {
 public:
  static constexpr size_t kMinBytes = (size_t{1} << BlockCache::kMaxClass) + 1;  // above the per-thread cache
  static constexpr size_t kLargeCacheBytes = size_t{1} << 30;                   // kept in all, at most

  // Whether a block of `bytes` goes through this cache: above the per-thread cache, and not so
  // large that it could never be kept (which also keeps rounded() far from overflow).
  static constexpr size_t kMaxBytes = kLargeCacheBytes;
  static bool serves(size_t bytes) { return bytes >= kMinBytes && bytes <= kMaxBytes; }

  // The size class of a block of `bytes` (serves(bytes)): rounded up to a multiple of 1/8 of
  // the power of two at or below it.
  static size_t rounded(size_t bytes) {
    size_t octave = size_t{1} << BlockCache::kMaxClass;
    while (octave <= bytes / 2) octave *= 2;
    const size_t step = octave / 8;
    return (bytes + step - 1) / step * step;
  }

  void* take(size_t rounded_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(rounded_bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= rounded_bytes;
    return p;
  }
  bool give(size_t rounded_bytes, void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_bytes_ + rounded_bytes > kLargeCacheBytes) return false;
    free_[rounded_bytes].push_back(p);
    cached_bytes_ += rounded_bytes;
    return true;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    counters().reserved.fetch_sub(static_cast<int64_t>(cached_bytes_), std::memory_order_relaxed);
    cached_bytes_ = 0;
  }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks of that size
  size_t cached_bytes_ = 0;
};

// Never destroyed: a tensor may be freed at exit, after static destructors have begun (a
// static tensor, or a worker such as the MPI thread dropping its last reference while main
// returns), and the cache must still be there to take it. The system reclaims what it holds.
LargeBlockCache& large_block_cache() {
  static auto* cache = new LargeBlockCache;
  return *cache;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes > static_cast<size_t>(PTRDIFF_MAX))  // no system gives that much, and rounding it would wrap
      throw OutOfMemory(detail::make_message("cpu allocator: failed to allocate ", bytes, " bytes"));
    const size_t rounded = block_size(bytes);
    Counters& n = counters();
    if (kUseBlockCache && bytes < LargeBlockCache::kMinBytes) {
      if (BlockCache::alive)
        if (void* p = block_cache().take(BlockCache::size_class(bytes))) return hit(rounded, p);
      if (void* p = large_block_cache().take(rounded)) return hit(rounded, p);  // a spilled block
    } else if (kUseBlockCache && LargeBlockCache::serves(bytes)) {  // Note [large CPU blocks are cached too]
      if (void* p = large_block_cache().take(rounded)) return hit(rounded, p);
    }
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr && kUseBlockCache && bytes >= LargeBlockCache::kMinBytes) {
      large_block_cache().release();  // the cached blocks of other classes may be what is missing
      n.cache_flushes.fetch_add(1, std::memory_order_relaxed);
      p = std::aligned_alloc(kAlignment, rounded);
    }
    if (p == nullptr) throw OutOfMemory(detail::make_message("cpu allocator: failed to allocate ", bytes, " bytes"));
    n.system_allocations.fetch_add(1, std::memory_order_relaxed);
    n.reserved.fetch_add(static_cast<int64_t>(rounded), std::memory_order_relaxed);
    n.add_live(static_cast<int64_t>(rounded));
    return p;
  }
  void deallocate(void* ptr, size_t bytes) noexcept override {
    const auto size = static_cast<int64_t>(block_size(bytes));
    Counters& n = counters();
    n.allocated.fetch_sub(size, std::memory_order_relaxed);
    if (kUseBlockCache && bytes < LargeBlockCache::kMinBytes) {
      if (BlockCache::alive && block_cache().give(BlockCache::size_class(bytes), ptr)) return;
    }
    if (kUseBlockCache && bytes <= LargeBlockCache::kMaxBytes) {  // a large block, or a small one spilling
      try {
        if (large_block_cache().give(static_cast<size_t>(size), ptr)) return;
      } catch (...) {  // the cache's own bookkeeping could not grow: the block goes to the system
      }
    }
    n.reserved.fetch_sub(size, std::memory_order_relaxed);
    std::free(ptr);
  }

 private:
  // The size of the block a request of `bytes` gets. Small blocks are rounded to their class
  // even when this thread's cache is gone (at thread exit), so that another thread's cache can
  // file the block under its class when it is freed there; aligned_alloc wants a multiple of
  // the alignment, and at least one.
  static size_t block_size(size_t bytes) {
    if (kUseBlockCache && bytes < LargeBlockCache::kMinBytes) return size_t{1} << BlockCache::size_class(bytes);
    if (kUseBlockCache && LargeBlockCache::serves(bytes)) return LargeBlockCache::rounded(bytes);
    return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  static void* hit(size_t rounded, void* p) {
    counters().cache_hits.fetch_add(1, std::memory_order_relaxed);
    counters().add_live(static_cast<int64_t>(rounded));
    return p;
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

void release_cached_cpu_blocks() {
  if (kUseBlockCache) large_block_cache().release();
}

CpuAllocatorCounters cpu_allocator_counters() {
  const Counters& n = counters();
  CpuAllocatorCounters c;
  c.allocated_bytes = n.allocated.load(std::memory_order_relaxed);
  c.reserved_bytes = n.reserved.load(std::memory_order_relaxed);
  c.peak_allocated_bytes = n.peak.load(std::memory_order_relaxed);
  c.system_allocations = n.system_allocations.load(std::memory_order_relaxed);
  c.cache_hits = n.cache_hits.load(std::memory_order_relaxed);
  c.cache_flushes = n.cache_flushes.load(std::memory_order_relaxed);
  return c;
}

void reset_cpu_allocator_peak() {
  Counters& n = counters();
  n.peak.store(n.allocated.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Storage::Storage(size_t bytes, Device device, Allocator& allocator)
    : bytes_(bytes), device_(device), allocator_(&allocator) {
  void* p = allocator.allocate(bytes);
  if (profiler::active()) profiler::note_allocation(bytes);
  Allocator* a = &allocator;
  data_ = std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
}

}  // namespace minidl
