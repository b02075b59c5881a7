// The pinned host allocator of pinned_allocator.h: cudaHostAlloc / cudaFreeHost under the
// caching allocator, with events recorded on whichever device's stream read a block.
#include "kernels/cuda/pinned_allocator.h"

#include <unistd.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_guard.h"
#include "kernels/cuda/stream_event.h"

namespace minidl::cuda {

namespace {

class PinnedMemorySource final : public DeviceMemorySource {
 public:
  Device device() const override { return Device::cpu(); }
  void* try_allocate(size_t bytes) override {
    void* p = nullptr;
    RelaxedCaptureMode relaxed;  // a graph capture may pin a captured copy's source (tensor_table.cuh)
    const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);  // usable from every device
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MINIDL_CUDA_CHECK(status);
    return p;
  }
  void release(void* ptr) noexcept override { (void)cudaFreeHost(ptr); }
  void memory_info(size_t& free_bytes, size_t& total_bytes) noexcept override {
    const long page = sysconf(_SC_PAGESIZE);
    free_bytes = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<size_t>(page);
    total_bytes = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(page);
  }
  uint64_t record_event(void* stream) override { return record_stream_event(stream); }
  bool event_completed(uint64_t event) override { return stream_event_completed(event); }
  void destroy_event(uint64_t event) noexcept override { destroy_stream_event(event); }
};

}  // namespace

CachingAllocator& pinned_host_allocator() {
  // Never destroyed, like the device backends: freeing pinned pages after the CUDA runtime
  // has shut down at exit is an error.
  static CachingAllocator* allocator = new CachingAllocator(std::make_unique<PinnedMemorySource>());
  return *allocator;
}

}  // namespace minidl::cuda
