// CachingAllocator: the per-device memory pool of the CUDA backend, written in plain C++ over
// an abstract DeviceMemorySource so that its logic (size classes, reuse, statistics, the
// out-of-memory retry) is tested in CI on a fake device, without a GPU.
//
// Strategy:
//   - Requests are rounded up to a size class: multiples of 512 B up to 1 MiB, then multiples
//     of max(1 MiB, 2^(floor(log2 bytes) - 3)), so rounding wastes at most 1/8 above 8 MiB.
//   - A freed block goes to the free list of its class; the next request of that class takes
//     it without calling the device (a cache hit). Blocks are never split or merged: simple,
//     and training loops allocate the same sizes every step.
//   - When the device refuses (out of memory), every cached block is released and the request
//     retried once; if it fails again, OutOfMemory names the bytes asked, the device, its
//     free/total memory and what the cache holds.
//
// Note [stream-aware frees]: every kernel of a device runs on that device's one compute
// stream, so a block freed on the host can be handed out again at once: any later use of it
// is queued behind the earlier ones. A block that another stream also used (for example the
// communication stream of parallel/) is marked with record_stream(); when it is freed an event
// is recorded on that stream, and the block is reused only after the event has completed.
//
// Note [graph pools]: a CUDA graph replays its kernels on the addresses they were captured
// with, so every block a capture allocates must stay the graph's while the graph lives, even
// after the tensor that held it is freed: an eager op handed that block would be overwritten by
// the next replay. So while a pool is active (begin_pool .. end_pool, around a capture) every
// allocation becomes the pool's — a cached block of the right class, or a fresh one — and a
// pool's block freed at any time goes back to that pool's own free list, to be reused only by
// allocations of the same pool (the same capture, or a later capture into that pool, which is
// what lets several graphs share one pool). release_pool() (the graph is destroyed) gives the
// pool's free blocks to the shared cache; its blocks still in live tensors join it when freed.
// A pool's free blocks are reserved, not cached: empty_cache() leaves them alone. During a
// capture the out-of-memory retry does not empty the cache (cudaFree would wait for the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"

namespace minidl::cuda {

// The raw device API the allocator draws from (cudaMalloc and friends, or a fake in tests).
class DeviceMemorySource {
 public:
  virtual ~DeviceMemorySource() = default;
  virtual Device device() const = 0;
  // nullptr when the device is out of memory; any other failure throws.
  virtual void* try_allocate(size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
  virtual void memory_info(size_t& free_bytes, size_t& total_bytes) noexcept = 0;
  // Events on other streams, for Note [stream-aware frees].
  virtual uint64_t record_event(void* stream) = 0;
  virtual bool event_completed(uint64_t event) = 0;
  virtual void destroy_event(uint64_t event) noexcept = 0;
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(std::unique_ptr<DeviceMemorySource> source);
  ~CachingAllocator() override;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;

  // The block holding ptr will also be used on `stream` (see the Note above).
  void record_stream(void* ptr, void* stream);

  MemoryStats stats() const;
  void empty_cache();
  void reset_peak();

  static size_t size_class(size_t bytes);

  // Note [graph pools]. A pool id is never 0 (the shared cache); new_pool() hands out fresh ones.
  using PoolId = uint64_t;
  PoolId new_pool();
  void begin_pool(PoolId pool);  // every allocation goes to `pool` until end_pool()
  void end_pool();
  void release_pool(PoolId pool);
  // Blocks of `pool`: in live tensors, and free in its list.
  int64_t pool_live_bytes(PoolId pool) const;
  int64_t pool_free_bytes(PoolId pool) const;

 private:
  struct LiveBlock {
    size_t size = 0;                 // its size class
    std::vector<void*> extra_streams;  // streams besides the compute stream that used it
    PoolId pool = 0;                 // 0: the shared cache
  };
  struct Pool {
    std::map<size_t, std::vector<void*>> free_blocks;
    int64_t live_bytes = 0, free_bytes = 0;
  };
  struct PendingBlock {
    void* ptr = nullptr;
    size_t size = 0;
    std::vector<uint64_t> events;
  };

  void* allocate_locked(size_t size, size_t requested);  // size: its class; requested: what the caller asked
  void release_cached_locked();      // every free block back to the device
  void collect_pending_locked();     // pending blocks whose events completed become free
  void share_pool_blocks_locked(Pool& pool);  // a pool's free blocks into the shared cache
  std::string describe_locked() const;

  std::unique_ptr<DeviceMemorySource> source_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;  // size class -> cached blocks
  std::unordered_map<void*, LiveBlock> live_blocks_;
  std::vector<PendingBlock> pending_blocks_;
  std::map<PoolId, Pool> pools_;     // pools not yet released
  PoolId active_pool_ = 0;
  PoolId next_pool_ = 1;
  MemoryStats stats_;
  int64_t cached_bytes_ = 0;
};

}  // namespace minidl::cuda
