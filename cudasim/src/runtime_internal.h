// What the simulated runtime offers the simulated libraries (cuBLAS, NCCL) beside the public
// CUDA API: work enqueued on a stream, the devices, device-memory lookups and device faults.
// Internal to cudasim: nothing outside cudasim/src includes it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace cudasim {

// Simulated devices (MINIDL_SIM_DEVICES, default 2) and the calling host thread's current one.
int device_count();
int current_device();

// The device whose allocation (cudaMalloc) holds all of [p, p + bytes), or -1 if none does.
int device_of(const void* p, size_t bytes);

// Whether [p, p + bytes) lies in memory a kernel may touch: a device allocation or pinned host
// memory (cudaHostAlloc).
bool device_accessible(const void* p, size_t bytes);

// The device a stream belongs to (nullptr: the current device's legacy default stream), or -1
// for a handle that is not a live stream.
int stream_device(cudaStream_t stream);

// Queues `work` on `stream` (nullptr: the current device's legacy default stream) behind
// everything queued there before; it runs on that stream's own host thread, asynchronously to
// the caller and to other streams. While the stream is being captured, `work` is recorded
// into the graph instead. `what` names the operation in error messages. Returns
// cudaErrorInvalidResourceHandle for a bad stream, or the context's sticky error if one is set
// (then nothing is queued).
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// From inside queued work: the operation failed on the device, as a kernel's illegal address
// does. `message` goes to stderr at once; `code` becomes the sticky error every later runtime
// call returns.
void device_fault(cudaError_t code, const std::string& message);

// Sets the calling thread's last error (cudaGetLastError) and returns `code`.
cudaError_t set_last_error(cudaError_t code);

}  // namespace cudasim
