// Pinned (page-locked) host memory, the source of asynchronous host-to-device copies. It is
// a CachingAllocator over cudaHostAlloc: DataLoader batches headed to a GPU reuse the same
// few buffers every step instead of pinning fresh pages (which costs far more than a copy).
// A pinned block used by an asynchronous copy is marked with record_stream, so it is not
// handed out again before that copy has read it (Note [stream-aware frees]).
#pragma once

#include "kernels/cuda/caching_allocator.h"

namespace minidl::cuda {

CachingAllocator& pinned_host_allocator();

}  // namespace minidl::cuda
