// Storage: one reference-counted block of device memory, obtained from the device's Allocator.
// Tensors are views into a Storage (shape, strides, offset); many views may share one.
#pragma once

#include <cstddef>
#include <memory>

#include "core/device.h"

namespace minidl {

// Allocator: hands out raw bytes on one device. The CPU allocator returns 64-byte aligned
// blocks (one cache line, one AVX-512 register); the CUDA backend brings a caching allocator.
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` bytes (a valid, unique pointer even for 0 bytes), or throws.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
};

// The process-wide CPU allocator (64-byte aligned). It keeps freed blocks for reuse (Note [the
// CPU block cache] and Note [large CPU blocks are cached too] in core/storage.cpp).
Allocator& cpu_allocator();
// Returns the CPU allocator's process-wide cached blocks (those above 1 MiB, and the smaller ones
// that spilled from a full per-thread list) to the system (empty_cache(Device::cpu())).
void release_cached_cpu_blocks();

// The CPU allocator's counters (Note [the CPU allocator's counters] in core/storage.cpp), in the
// terms of the CUDA caching allocator's: bytes in live tensors and obtained from the system,
// counted by the blocks' sizes; the peak of the live bytes since start or the last reset;
// allocations the system served and the cache served.
struct CpuAllocatorCounters {
  int64_t allocated_bytes = 0, reserved_bytes = 0, peak_allocated_bytes = 0;
  int64_t system_allocations = 0, cache_hits = 0, cache_flushes = 0;
};
CpuAllocatorCounters cpu_allocator_counters();
void reset_cpu_allocator_peak();

class Storage {
 public:
  Storage() = default;
  Storage(size_t bytes, Device device, Allocator& allocator);

  void* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool defined() const { return static_cast<bool>(data_); }
  long use_count() const { return data_.use_count(); }
  // The allocator the bytes came from (tells pinned host memory from pageable, for example).
  Allocator* allocator() const { return allocator_; }

 private:
  std::shared_ptr<void> data_;
  size_t bytes_ = 0;
  Device device_{};
  Allocator* allocator_ = nullptr;
};

}  // namespace minidl
