// Memory on a device, as a user sees it: the caching allocator's statistics, emptying its
// cache, and page-locked (pinned) host tensors for fast, asynchronous copies to a GPU.
#pragma once

#include "core/backend.h"

namespace minidl {

// Statistics of `device`'s caching allocator (CUDA devices, and the CPU's block caches).
MemoryStats memory_stats(Device device);
// Returns the cached, unused blocks of `device` to the driver or, on the CPU, those above
// 1 MiB to the system (live tensors are untouched).
void empty_cache(Device device);
void reset_peak_memory_stats(Device device);

// A copy of the CPU tensor `x` in pinned host memory (throws in a build or on a machine without
// CUDA, and for tensors not on the CPU). Copies from pinned memory to a GPU are asynchronous.
Tensor pin_memory(const Tensor& x);
bool is_pinned(const Tensor& x);

}  // namespace minidl
