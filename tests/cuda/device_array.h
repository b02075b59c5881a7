// Test kernels' host side, for the CUDA tests that define kernels of their own (compiled by nvcc
// in a GPU build, as C++ against the simulated device otherwise): a launch on the default stream
// with its check, and cudaMalloc'd arrays freed at scope exit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace minidl::cuda_test {

// A launch of `blocks` x `threads` on the default stream, then its check: <<<...>>> under nvcc, the
// simulated device's launcher otherwise (as kernels/cuda/launch.cuh does for the library).
template <class... Params>
void launch(void (*kernel)(Params...), unsigned blocks, unsigned threads, std::type_identity_t<Params>... args) {
#if defined(__CUDACC__)
  kernel<<<blocks, threads>>>(args...);
#else
  ::cudasim_launch_at(__FILE__, __LINE__, kernel, dim3(blocks), dim3(threads), 0, nullptr, args...);
#endif
  MINIDL_CUDA_CHECK(cudaGetLastError());
}

// cudaMalloc'd memory on the current device, freed at scope exit.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { MINIDL_CUDA_CHECK(cudaMalloc(&p_, (n_ > 0 ? n_ : 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    MINIDL_CUDA_CHECK(cudaMemcpy(p_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { (void)cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }
  // The contents as values of U (the same size as T: a pair type read as its 32-bit word).
  template <class U = T>
  std::vector<U> read() const {
    static_assert(sizeof(U) == sizeof(T));
    std::vector<U> out(n_);
    MINIDL_CUDA_CHECK(cudaDeviceSynchronize());
    MINIDL_CUDA_CHECK(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

}  // namespace minidl::cuda_test
