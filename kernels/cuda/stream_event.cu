// The stream events of stream_event.h over the CUDA runtime.
#include "kernels/cuda/stream_event.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"

namespace minidl::cuda {

uint64_t record_stream_event(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  int device = 0;
  MINIDL_CUDA_CHECK(cudaStreamGetDevice(s, &device));
  DeviceGuard guard(device);  // an event is created on, and recorded by, the stream's device
  cudaEvent_t e = nullptr;
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  MINIDL_CUDA_CHECK(cudaEventRecord(e, s));
  return reinterpret_cast<uint64_t>(e);
}

bool stream_event_completed(uint64_t event) {
  const cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error: keep later checks clean
    return false;
  }
  MINIDL_CUDA_CHECK(status);
  return true;
}

void destroy_stream_event(uint64_t event) noexcept { (void)cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)); }

namespace {

class TimestampEvent final : public DeviceTimestamp {
 public:
  TimestampEvent(cudaEvent_t event, cudaStream_t stream) : event_(event), stream_(stream) {}
  ~TimestampEvent() override { (void)cudaEventDestroy(event_); }
  double ms_since(const DeviceTimestamp& earlier) const override {
    const auto& e = static_cast<const TimestampEvent&>(earlier);
    MINIDL_CUDA_CHECK(cudaEventSynchronize(e.event_));
    MINIDL_CUDA_CHECK(cudaEventSynchronize(event_));
    float ms = 0;
    MINIDL_CUDA_CHECK(cudaEventElapsedTime(&ms, e.event_, event_));
    return ms;
  }
  void* stream() const override { return stream_; }

 private:
  cudaEvent_t event_;
  cudaStream_t stream_;
};

}  // namespace

std::shared_ptr<DeviceTimestamp> record_timestamp_event(void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  int device = 0;
  MINIDL_CUDA_CHECK(cudaStreamGetDevice(s, &device));
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  MINIDL_CUDA_CHECK(cudaEventCreate(&e));  // with timing
  auto stamp = std::make_shared<TimestampEvent>(e, s);  // owns e from here, also if the record fails
  MINIDL_CUDA_CHECK(cudaEventRecord(e, s));
  return stamp;
}

}  // namespace minidl::cuda
