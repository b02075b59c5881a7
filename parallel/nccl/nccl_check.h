// The checks of parallel/nccl, shared by the NCCL communicator (one process, several GPUs) and
// the NCCL process group (one GPU per process): every NCCL return code, and every CUDA runtime
// call that code makes itself (its streams and events), becomes a minidl::Error naming the
// call as written, its file and line, and the library's own description (Note [NCCL errors] in
// parallel/nccl/nccl_communicator.h). Also the dtype map from minidl's DType to NCCL's.
//
// The CUDA check here is the NCCL code's own, not kernels/cuda's MINIDL_CUDA_CHECK: parallel/
// reaches the CUDA backend only through core/backend.h (its stream, record_stream, the current
// device), and a failed runtime call is reported in the same words as the backend's.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <sstream>

#include "core/dtype.h"
#include "core/error.h"

namespace minidl::parallel::nccl {

// `comm` is the communicator whose last-error text is quoted (nullptr: the thread's last).
[[noreturn]] inline void throw_nccl_error(ncclResult_t status, ncclComm_t comm, const char* call, const char* file,
                                          int line) {
  std::ostringstream os;
  os << "NCCL error " << static_cast<int>(status) << " (" << ncclGetErrorString(status) << ") in " << call << " at "
     << file << ":" << line;
  const char* last = ncclGetLastError(comm);  // NCCL's own words on the last failure, if any
  if (last != nullptr && last[0] != '\0') os << ": " << last;
  throw Error(os.str());
}

// As kernels/cuda/cuda_check.h words it: an allocation failure is an OutOfMemory.
[[noreturn]] inline void throw_cuda_runtime_error(cudaError_t status, const char* call, const char* file, int line) {
  const std::string msg = detail::make_message("CUDA error ", cudaGetErrorName(status), " (",
                                               cudaGetErrorString(status), ") from ", call, " at ", file, ":", line);
  if (status == cudaErrorMemoryAllocation) throw OutOfMemory(msg);
  throw Error(msg);
}

// NCCL's element type for a tensor's dtype; `who` names the caller in the error.
inline ncclDataType_t nccl_dtype(DType dtype, const char* who) {
  switch (dtype) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float16:
      return ncclFloat16;
  }
  throw Error(detail::make_message(who, ": no NCCL type for dtype ", static_cast<int>(dtype)));
}

}  // namespace minidl::parallel::nccl

#define MINIDL_NCCL_CHECK(comm, call)                                                              \
  do {                                                                                             \
    const ncclResult_t minidl_nccl_status_ = (call);                                               \
    if (minidl_nccl_status_ != ncclSuccess)                                                        \
      ::minidl::parallel::nccl::throw_nccl_error(minidl_nccl_status_, (comm), #call, __FILE__, __LINE__); \
  } while (0)

#define MINIDL_NCCL_CUDA_CHECK(call)                                                               \
  do {                                                                                             \
    const cudaError_t minidl_nccl_cuda_status_ = (call);                                           \
    if (minidl_nccl_cuda_status_ != cudaSuccess)                                                   \
      ::minidl::parallel::nccl::throw_cuda_runtime_error(minidl_nccl_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)
