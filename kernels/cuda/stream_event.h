// The events behind Note [stream-aware frees] (caching_allocator.h), shared by the two memory
// sources that need them: device memory (cuda_backend.cu) and pinned host memory
// (pinned_allocator.cu). An event is handed to the allocator as an opaque uint64_t. And the
// timing events behind the profiler's device times (Backend::record_timestamp).
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend.h"

namespace minidl::cuda {

// Records a timing-free event on `stream` (a cudaStream_t), on the stream's own device.
uint64_t record_stream_event(void* stream);
// Whether the work queued before the event has finished (cudaEventQuery, without waiting).
bool stream_event_completed(uint64_t event);
void destroy_stream_event(uint64_t event) noexcept;

// A timing event recorded on `stream`, read by DeviceTimestamp::ms_since (cudaEventSynchronize
// on both, then cudaEventElapsedTime); destroyed with the object.
std::shared_ptr<DeviceTimestamp> record_timestamp_event(void* stream);

}  // namespace minidl::cuda
