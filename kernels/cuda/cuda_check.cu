// The error paths of cuda_check.h: format one message and throw.
#include "kernels/cuda/cuda_check.h"

#include "core/error.h"

namespace minidl::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  const std::string msg = detail::make_message("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
                                               ") from ", call, " at ", file, ":", line);
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(msg);
  throw Error(msg);
}

namespace {
const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}
}  // namespace

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(detail::make_message("cuBLAS error ", cublas_status_name(status), " (", static_cast<int>(status),
                                   ") from ", call, " at ", file, ":", line));
}

void check_launch(const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda_error(status, "kernel launch", file, line);
}

}  // namespace minidl::cuda
