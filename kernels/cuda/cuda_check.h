// One thin check for every CUDA and cuBLAS return code, and the launch check that
// MINIDL_LAUNCH (kernels/cuda/launch.cuh), the one way kernels/cuda launches a kernel, runs
// after every launch (a test scans the sources for launches that bypass it).
// A failure becomes a minidl::Error naming the call as written, its file and line, and the
// runtime's own description — never an abort, so a caller can report it and carry on.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace minidl::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// After a launch: a bad configuration (grid, block, shared memory) shows up here at once;
// a fault inside the kernel surfaces at the next synchronising call, also checked.
void check_launch(const char* file, int line);

}  // namespace minidl::cuda

#define MINIDL_CUDA_CHECK(call)                                                      \
  do {                                                                               \
    const cudaError_t minidl_status_ = (call);                                       \
    if (minidl_status_ != cudaSuccess)                                               \
      ::minidl::cuda::throw_cuda_error(minidl_status_, #call, __FILE__, __LINE__);   \
  } while (0)

#define MINIDL_CUBLAS_CHECK(call)                                                    \
  do {                                                                               \
    const cublasStatus_t minidl_status_ = (call);                                    \
    if (minidl_status_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::minidl::cuda::throw_cublas_error(minidl_status_, #call, __FILE__, __LINE__); \
  } while (0)
