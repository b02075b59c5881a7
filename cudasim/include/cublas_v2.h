// cuBLAS of the simulated device (cudasim): the part of the cuBLAS v2 API that minidl uses —
// a handle with its stream and math mode, and cublasSgemm — with cuBLAS's names,
// types, enum values and argument checks, implemented on the CPU (cudasim/src/cublas.cpp). A
// MINIDL_CUDA_SIM build puts cudasim/include first on the include path, so kernels/cuda's
// cuBLAS baseline (cublas_gemm.cu) compiles and runs unchanged.
//
// Simulated faithfully: the column-major GEMM C = alpha·op(A)·op(B) + beta·C with op N, T or C
// (C is T for real numbers), cuBLAS's INVALID_VALUE for negative sizes, unknown operations and
// leading dimensions too small for their matrix, the quick returns (m or n = 0: nothing; k = 0
// or alpha = 0: A and B are not read), beta = 0 meaning C is written without being read (a NaN
// there does not survive), alpha and beta read from host memory when the call is made
// (CUBLAS_POINTER_MODE_HOST), the product running asynchronously on the handle's stream, and
// an operand that is not device memory failing on the device (an illegal-address fault, the
// sticky cudaErrorIllegalAddress) instead of being touched. CUBLAS_TF32_TENSOR_OP_MATH rounds
// A and B to TF32 (10 mantissa bits) before multiplying, as the tensor cores do.
// Not simulated: cuBLAS's blocking and its summation order (the simulation adds the K products
// of each output one after another in float, like a naive loop, so results agree with cuBLAS's
// to rounding, not bit for bit), workspaces, the device pointer mode, and every other routine.
#pragma once

#include <cuda_runtime.h>

struct cublasContext;
typedef struct cublasContext* cublasHandle_t;

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_OP_C = 2,
  CUBLAS_OP_HERMITAN = 2,  // synonym of CUBLAS_OP_C
  CUBLAS_OP_CONJG = 3      // conjugate without transpose: not accepted by cublasSgemm
} cublasOperation_t;

typedef enum {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,  // deprecated by cuBLAS; accepted, computes as the default
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16  // a flag, OR-ed with one of the above
} cublasMath_t;

#define CUBLAS_VER_MAJOR 13
#define CUBLAS_VER_MINOR 0
#define CUBLAS_VER_PATCH 0
#define CUBLAS_VERSION (CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH)

extern "C" {

// A handle on the legacy default stream. cuBLAS binds it to the device current now; the
// simulation does not check that later calls are made with the same device current.
cublasStatus_t cublasCreate(cublasHandle_t* handle);
// Waits for nothing (as cuBLAS: work already queued on the stream still runs) and frees it.
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasGetVersion(cublasHandle_t handle, int* version);

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode);

const char* cublasGetStatusName(cublasStatus_t status);    // "CUBLAS_STATUS_INVALID_VALUE"
const char* cublasGetStatusString(cublasStatus_t status);  // what it means, in words

// Column-major C[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · C, queued on the handle's
// stream. A is [m, k] (lda >= max(1, m)) for CUBLAS_OP_N and [k, m] (lda >= max(1, k)) otherwise;
// B likewise [k, n] or [n, k]; ldc >= max(1, m).
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc);

// batchCount products of cublasSgemm's form, product i on A + i·strideA, B + i·strideB and
// C + i·strideC (a stride may be 0: one matrix for every product), queued in order.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC,
                                         int batchCount);

}  // extern "C"
