// The events behind Note [stream-aware frees] (caching_allocator.h), shared by the two memory
// sources that need them: device memory (cuda_backend.cu) and pinned host memory
// (pinned_allocator.cu). An event is handed to the allocator as an opaque uint64_t.
#pragma once

#include <cstdint>

namespace minidl::cuda {

// Records a timing-free event on `stream` (a cudaStream_t), on the stream's own device.
uint64_t record_stream_event(void* stream);
// Whether the work queued before the event has finished (cudaEventQuery, without waiting).
bool stream_event_completed(uint64_t event);
void destroy_stream_event(uint64_t event) noexcept;

}  // namespace minidl::cuda
