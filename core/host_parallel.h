// host_parallel: a parallel loop over host memory for the layers above core (data/ converts a
// dataset's pixels with it), run by the same worker threads as the CPU kernels. Core declares
// it and kernels/cpu/host_parallel.cpp defines it on the kernels' ThreadPool, the way
// core/backend.h declares the backends: data/ keeps to core, and a process has one team of
// worker threads, not one per library it links.
#pragma once

#include <cstdint>
#include <functional>

namespace minidl {

// Threads a host parallel loop may use, the caller included: OMP_NUM_THREADS (its first
// value), else the CPUs this process may run on. The CPU kernels use the same count.
int host_threads();

// Calls body(begin, end) on disjoint slices that together cover [0, n): one slice per thread,
// each at least `grain` items long, so a loop shorter than 2·grain runs on the calling thread as
// one slice. Slices run at the same time, so body may write only its own range. Returns when
// every slice has finished; the first exception a slice threw is rethrown then. While the
// threads are busy with another loop (a call from a DataLoader worker thread, say), the slices
// run one after another on the calling thread.
void host_parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body);

}  // namespace minidl
