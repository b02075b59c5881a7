// CachingAllocator (see caching_allocator.h for the strategy and its Notes).
#include "kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace minidl::cuda {

namespace {
constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB

// A free block of class `size` from `lists`, removed from it; nullptr when it has none.
void* take_free(std::map<size_t, std::vector<void*>>& lists, size_t size) {
  auto it = lists.find(size);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

std::string mib(int64_t bytes) {
  return detail::make_message(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB");
}
}  // namespace

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes <= kSmallLimit) return std::max(kSmallStep, (bytes + kSmallStep - 1) / kSmallStep * kSmallStep);
  const int log2 = std::bit_width(bytes) - 1;  // floor(log2(bytes))
  const size_t step = std::max(kSmallLimit, size_t{1} << (log2 - 3));
  MINIDL_CHECK(bytes <= SIZE_MAX - step, "CachingAllocator: request of ", bytes, " bytes is too large");
  return (bytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemorySource> source) : source_(std::move(source)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& p : pending_blocks_) {
    for (uint64_t e : p.events) source_->destroy_event(e);
    free_blocks_[p.size].push_back(p.ptr);
  }
  pending_blocks_.clear();
  for (auto& [id, pool] : pools_) share_pool_blocks_locked(pool);
  pools_.clear();
  release_cached_locked();
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = nullptr;
  if (active_pool_ != 0) {  // Note [graph pools]: the pool's own free block first
    Pool& pool = pools_.at(active_pool_);
    if ((p = take_free(pool.free_blocks, size)) != nullptr) {
      pool.free_bytes -= static_cast<int64_t>(size);
      ++stats_.cache_hits;
    }
  }
  if (p == nullptr) p = allocate_locked(size, bytes);
  live_blocks_[p] = LiveBlock{size, {}, active_pool_};
  if (active_pool_ != 0) pools_.at(active_pool_).live_bytes += static_cast<int64_t>(size);
  stats_.allocated_bytes += static_cast<int64_t>(size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return p;
}

void* CachingAllocator::allocate_locked(size_t size, size_t requested) {
  const bool capturing = active_pool_ != 0;  // no event queries, no cudaFree: see Note [graph pools]
  if (!pending_blocks_.empty() && !capturing) collect_pending_locked();
  if (void* p = take_free(free_blocks_, size)) {
    cached_bytes_ -= static_cast<int64_t>(size);
    ++stats_.cache_hits;
    return p;
  }
  void* p = source_->try_allocate(size);
  bool flushed = false;
  if (p == nullptr && !capturing) {
    // Out of memory: give every free cached block back to the device (pending ones whose
    // streams are done included) and retry once. Blocks other streams still use stay.
    collect_pending_locked();
    if (cached_bytes_ > 0) {
      ++stats_.cache_flushes;
      release_cached_locked();
      flushed = true;
      p = source_->try_allocate(size);
    }
  }
  if (p == nullptr) {
    size_t free_bytes = 0, total_bytes = 0;
    source_->memory_info(free_bytes, total_bytes);
    throw OutOfMemory(detail::make_message(
        "out of memory on ", source_->device(), ": tried to allocate ", requested, " bytes (", mib(size),
        " with rounding); the device has ", mib(static_cast<int64_t>(free_bytes)), " free of ",
        mib(static_cast<int64_t>(total_bytes)), "; ", describe_locked(),
        capturing ? " (during a graph capture, which cannot empty the cache)"
        : flushed ? " (the cache was emptied and the allocation retried)"
                  : " (nothing was cached to free)"));
  }
  ++stats_.device_allocations;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) return;  // not ours: nothing sensible to do in a noexcept path
  const LiveBlock block = std::move(it->second);
  live_blocks_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(block.size);
  if (block.pool != 0) {
    auto pool = pools_.find(block.pool);
    if (pool != pools_.end()) {  // the pool's graph lives: the block stays the pool's
      pool->second.live_bytes -= static_cast<int64_t>(block.size);
      pool->second.free_bytes += static_cast<int64_t>(block.size);
      pool->second.free_blocks[block.size].push_back(ptr);
      return;
    }
  }
  if (!block.extra_streams.empty()) {
    PendingBlock pending{ptr, block.size, {}};
    try {
      for (void* s : block.extra_streams) pending.events.push_back(source_->record_event(s));
      pending_blocks_.push_back(std::move(pending));
      return;
    } catch (...) {
      // Recording failed (the device is in trouble): never reuse the block, hand it back.
      for (uint64_t e : pending.events) source_->destroy_event(e);
      source_->release(ptr);
      stats_.reserved_bytes -= static_cast<int64_t>(block.size);
      return;
    }
  }
  free_blocks_[block.size].push_back(ptr);
  cached_bytes_ += static_cast<int64_t>(block.size);
}

void CachingAllocator::record_stream(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_blocks_.find(ptr);
  MINIDL_CHECK(it != live_blocks_.end(), "CachingAllocator::record_stream: ", ptr, " is not a live block of ",
               source_->device());
  auto& streams = it->second.extra_streams;
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

void CachingAllocator::collect_pending_locked() {
  auto done = [&](PendingBlock& p) {
    for (uint64_t e : p.events)
      if (!source_->event_completed(e)) return false;
    for (uint64_t e : p.events) source_->destroy_event(e);
    free_blocks_[p.size].push_back(p.ptr);
    cached_bytes_ += static_cast<int64_t>(p.size);
    return true;
  };
  pending_blocks_.erase(std::remove_if(pending_blocks_.begin(), pending_blocks_.end(), done), pending_blocks_.end());
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) {
      source_->release(p);
      stats_.reserved_bytes -= static_cast<int64_t>(size);
    }
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
}

CachingAllocator::PoolId CachingAllocator::new_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  const PoolId id = next_pool_++;
  pools_.emplace(id, Pool{});
  return id;
}

void CachingAllocator::begin_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  MINIDL_CHECK(pools_.count(pool) != 0, "CachingAllocator::begin_pool: pool ", pool, " of ", source_->device(),
               " does not exist (released, or never made by new_pool)");
  MINIDL_CHECK(active_pool_ == 0, "CachingAllocator::begin_pool: pool ", active_pool_, " of ", source_->device(),
               " is already active; one capture at a time per device");
  active_pool_ = pool;
}

void CachingAllocator::end_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  active_pool_ = 0;
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  if (active_pool_ == pool) active_pool_ = 0;
  share_pool_blocks_locked(it->second);
  pools_.erase(it);  // its live blocks go to the shared cache when they are freed
}

void CachingAllocator::share_pool_blocks_locked(Pool& pool) {
  for (auto& [size, blocks] : pool.free_blocks) {
    auto& shared = free_blocks_[size];
    shared.insert(shared.end(), blocks.begin(), blocks.end());
    cached_bytes_ += static_cast<int64_t>(size * blocks.size());
  }
  pool.free_blocks.clear();
  pool.free_bytes = 0;
}

int64_t CachingAllocator::pool_live_bytes(PoolId pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.live_bytes;
}

int64_t CachingAllocator::pool_free_bytes(PoolId pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.free_bytes;
}

std::string CachingAllocator::describe_locked() const {
  size_t classes = 0;
  for (const auto& [size, blocks] : free_blocks_) classes += blocks.empty() ? 0 : 1;
  return detail::make_message("minidl's cache holds ", mib(stats_.reserved_bytes), " reserved (",
                              mib(stats_.allocated_bytes), " in live tensors, ", mib(cached_bytes_), " cached in ",
                              classes, " size classes, ", pending_blocks_.size(),
                              " freed block(s) still used by other streams)");
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_pending_locked();
  release_cached_locked();
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

}  // namespace minidl::cuda
