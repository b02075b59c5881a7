// DeviceGuard and QuietDeviceGuard: make one CUDA device current on this host thread for a
// scope and restore the previous one. Every CUDA backend method opens one, and so does code
// beside the backend that calls the CUDA runtime itself (parallel/nccl): a host thread (a
// DataParallel worker, say) may drive several devices. RelaxedCaptureMode lets an allocation
// happen during a graph capture.
#pragma once

#include <cuda_runtime.h>

namespace minidl::cuda {

// Makes `device` current for the scope; throws minidl::Error when it cannot be set (defined in
// cuda_backend.cu).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// DeviceGuard for destructors and noexcept paths: never throws; when the device cannot be set
// (a sticky error), the calls that follow fail on their own and report it.
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == device || cudaSetDevice(device) != cudaSuccess)
      previous_ = -1;
  }
  ~QuietDeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Makes the calling thread's stream-capture mode relaxed for the scope, so that an allocation
// (cudaMalloc, cudaHostAlloc) made while a CUDA graph is being captured does not end that capture
// (Note [graph pools], caching_allocator.h). Outside a capture it changes nothing. Never throws.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept { ok_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess; }
  ~RelaxedCaptureMode() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // swapped with the thread's
  bool ok_ = false;
};

}  // namespace minidl::cuda
