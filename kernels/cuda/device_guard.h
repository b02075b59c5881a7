// DeviceGuard and QuietDeviceGuard: make one CUDA device current on this host thread for a
// scope and restore the previous one. Every CUDA backend method opens one, and so does code
// beside the backend that calls the CUDA runtime itself (parallel/nccl): a host thread (a
// DataParallel worker, say) may drive several devices.
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

}  // namespace minidl::cuda
