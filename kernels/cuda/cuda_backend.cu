// The CUDA backend's frame: the per-device registry behind core's cuda_backend(), device
// discovery, the compute stream and cuBLAS handle, the device memory source of the caching
// allocator, the pinned host allocator, and synchronisation. Kernels live in the family files.
#include "kernels/cuda/cuda_backend.h"

#include <array>
#include <atomic>
#include <deque>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pinned_allocator.h"
#include "kernels/cuda/stream_event.h"

namespace minidl::cuda {

namespace {

// cudaMalloc / cudaFree / events for the caching allocator of one device.
class CudaMemorySource final : public DeviceMemorySource {
 public:
  explicit CudaMemorySource(int device) : device_(device) {}
  Device device() const override { return Device::cuda(device_); }

  void* try_allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    RelaxedCaptureMode relaxed;  // Note [graph pools]: a capture allocates too
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the (non-sticky) error so later launch checks stay clean
      return nullptr;
    }
    MINIDL_CUDA_CHECK(status);
    return p;
  }
  void release(void* ptr) noexcept override {
    QuietDeviceGuard guard(device_);
    (void)cudaFree(ptr);  // cudaFree waits for the device; a failure here leaves nothing to undo
  }
  void memory_info(size_t& free_bytes, size_t& total_bytes) noexcept override {
    QuietDeviceGuard guard(device_);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) free_bytes = total_bytes = 0;
  }
  uint64_t record_event(void* stream) override { return record_stream_event(stream); }
  bool event_completed(uint64_t event) override { return stream_event_completed(event); }
  void destroy_event(uint64_t event) noexcept override { destroy_stream_event(event); }

 private:
  int device_;
};

int query_device_count() {
  int count = 0;
  // No driver, no device, or a driver older than the runtime: all mean "no usable GPU" here.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  MINIDL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) MINIDL_CUDA_CHECK(cudaSetDevice(device));
  else previous_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

CudaBackend::CudaBackend(int device_index) : device_(device_index) {
  DeviceGuard guard(device_);
  MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, device_));
  MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor_, cudaDevAttrComputeCapabilityMinor, device_));
  // Non-blocking: the legacy default stream (used by libraries we do not control) does not
  // serialise against it.
  MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  allocator_ = std::make_unique<CachingAllocator>(std::make_unique<CudaMemorySource>(device_));
}

cublasHandle_t CudaBackend::cublas() {
  std::call_once(cublas_once_, [&] {
    DeviceGuard guard(device_);
    MINIDL_CUBLAS_CHECK(cublasCreate(&cublas_));
    MINIDL_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // The baseline is plain fp32: no TF32 tensor-core shortcut (CUBLAS_DEFAULT_MATH keeps
    // full fp32 unless TF32 is requested explicitly).
    MINIDL_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  });
  return cublas_;
}

void CudaBackend::synchronize() {
  refuse_in_capture("synchronize", "the host would wait for work that is being recorded, not run");
  DeviceGuard guard(device_);
  MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  raise_deferred_errors();
}

void CudaBackend::raise_deferred_errors() {
  std::vector<TargetErrorMessage> messages;
  std::vector<unsigned long long> slots;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);  // no check takes a slot while they are read
    if (deferred_messages_.empty()) return;
    messages.swap(deferred_messages_);
    slots.resize(2 * messages.size());
    DeviceGuard guard(device_);
    // On the stream, behind every check that wrote these slots; the caller has just waited for
    // the stream, so this wait is only for the copy itself.
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(slots.data(), deferred_slots_, slots.size() * sizeof(unsigned long long),
                                      cudaMemcpyDeviceToHost, stream_));
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (slots[2 * i] == ~0ULL) continue;  // all bits set: no bad row
    throw Error(messages[i](static_cast<int64_t>(slots[2 * i]), static_cast<int64_t>(slots[2 * i + 1])));
  }
}

MemoryStats CudaBackend::memory_stats() { return allocator_->stats(); }

void CudaBackend::empty_cache() {
  synchronize();
  allocator_->empty_cache();
}

void CudaBackend::reset_peak_memory_stats() { allocator_->reset_peak(); }

// None during a graph capture: the event would be recorded into the graph, not on the timeline.
std::shared_ptr<DeviceTimestamp> CudaBackend::record_timestamp() {
  return capturing() ? nullptr : record_timestamp_event(stream_);
}

void CudaBackend::record_stream(const Tensor& t, void* stream) {
  MINIDL_INTERNAL_ASSERT(t.device() == device(), "record_stream: a tensor on ", t.device(), " given to ", device());
  allocator_->record_stream(t.storage().data(), stream);
}

// DeviceGuard's and QuietDeviceGuard's steps, for CurrentDeviceGuard (core/backend.h).
int CudaBackend::make_current() {
  int previous = -1;
  MINIDL_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous == device_) return -1;  // nothing to restore
  MINIDL_CUDA_CHECK(cudaSetDevice(device_));
  return previous;
}

int CudaBackend::make_current_quietly() noexcept {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess || previous == device_ || cudaSetDevice(device_) != cudaSuccess)
    return -1;
  return previous;
}

void CudaBackend::restore_current(int previous) noexcept {
  if (previous >= 0) (void)cudaSetDevice(previous);
}

CudaBackend& backend_of(const Tensor& t) {
  MINIDL_INTERNAL_ASSERT(t.device().is_cuda(), "backend_of: a tensor on ", t.device());
  return static_cast<CudaBackend&>(backend_for(t.device()));
}

}  // namespace minidl::cuda

namespace minidl {

int cuda_backend_device_count() {
  static const int count = cuda::query_device_count();
  return count;
}

Backend* cuda_backend(int device_index) {
  const int count = cuda_backend_device_count();
  if (device_index < 0 || device_index >= count) return nullptr;
  // One slot per device, created on first use; never destroyed (see ~CudaBackend). The registries
  // themselves are never destroyed either: a destructor that runs at exit (a communicator's, with
  // its CurrentDeviceGuard) may still look a backend up after static destruction began.
  static auto& once = *new std::deque<std::once_flag>(static_cast<size_t>(count));
  static auto& slots = *new std::deque<std::atomic<cuda::CudaBackend*>>(static_cast<size_t>(count));
  std::call_once(once[static_cast<size_t>(device_index)],
                 [&] { slots[static_cast<size_t>(device_index)].store(new cuda::CudaBackend(device_index)); });
  return slots[static_cast<size_t>(device_index)].load();
}

std::string cuda_backend_device_name(int device_index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_index) != cudaSuccess) {
    (void)cudaGetLastError();
    return "unknown CUDA device";
  }
  return prop.name;
}

Allocator* cuda_pinned_host_allocator() {
  if (cuda_backend_device_count() == 0) return nullptr;
  return &cuda::pinned_host_allocator();
}

}  // namespace minidl
