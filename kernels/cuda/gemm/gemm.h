// The GEMM problem shared by the two CUDA GEMMs (simt_gemm.cu: hand-written; cublas_gemm.cu:
// cuBLAS) and their caller (linear.cu): one row-major description with pointers and leading
// dimensions, so matmul, linear forward and every backward product are the same call with
// different transpose flags, and no operand is ever copied to transpose it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/ops/gelu.h"
#include "kernels/cuda/gemm/gemm_plan.h"

namespace minidl::cuda {

// C[M, N] = act(op(A) · op(B) + bias), every matrix row-major with elements of `dtype`:
//   A is [M, K] with row stride lda, or [K, M] when trans_a (op(A) = Aᵀ);
//   B is [K, N] with row stride ldb, or [N, K] when trans_b;
//   C is [M, N] with row stride ldc; bias is [N] added to every row, or nullptr;
//   act is ReLU (v < 0 ? 0 : v, so NaN stays NaN as on the CPU) when relu, else identity;
//   with gelu_out set (and relu false), C gets the pre-activation v and gelu_out (C's layout:
//   ldc, stride_c) gets gelu(v) in gelu_form, computed from C's rounded value: the bits of the
//   product followed by a separate GELU, in the same pass (epilogue.cuh).
// dtype is float32, bfloat16 or float16, one for A, B, C and bias alike (the pointers are untyped
// so that one description serves the three). The math is float32 whatever the dtype: 16-bit
// elements are widened as they are read and C is rounded once as it is written. Leading
// dimensions and strides count elements.
struct GemmProblem {
  DType dtype = DType::Float32;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  void* c = nullptr;
  int64_t ldc = 0;
  const void* bias = nullptr;
  bool relu = false;
  void* gelu_out = nullptr;
  GeluApproximate gelu_form = GeluApproximate::None;
  // A strided batch of such products: product i reads A + i·stride_a and B + i·stride_b (0: the
  // same matrix for every product) and writes C + i·stride_c. The bias and ReLU apply to each.
  // The native kernel runs a batch only on a plan that keeps K whole (native_batched_gemm_plan).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// The largest dimension either GEMM accepts (cuBLAS takes int; the native kernel's tile
// arithmetic stays clear of int overflow below this). Checked with a clear error.
constexpr int64_t kMaxGemmDim = int64_t{1} << 30;

// Hand-written tiled SGEMM (simt_gemm.cu) on the plan native_gemm_plan(m, n, k, sm_count) picks
// (gemm_plan.h), for any of the three dtypes (float32 math, hence the name). Needs m, n, k >= 1,
// and `workspace` on the same device with that plan's workspace_floats() floats (nullptr when
// that is 0; float32 whatever the dtype: split-K partials are float32). Queued on `stream`.
void native_sgemm(const GemmProblem& p, int sm_count, float* workspace, cudaStream_t stream);

// The same on a plan given by the caller (benchmarks and tests try plans the heuristic would not
// pick): throws minidl::Error if check_gemm_plan refuses it for p's M, N, K, or if it splits K
// and `workspace` is nullptr (it must hold plan.workspace_floats() floats). `sm_count` sizes
// the grid of the split-K sum only.
void native_sgemm_with_plan(const GemmProblem& p, const NativeGemmPlan& plan, int sm_count, float* workspace,
                            cudaStream_t stream);

// The tensor-core GEMM (mma_gemm.cu) on one of its rungs (kernel: Mma, MmaLdmatrix or
// MmaPipeline; the first two run the large tile whatever `tile` says): C = act(op(A)·op(B) +
// bias) for bfloat16 or float16 matrices (throws minidl::Error for another dtype), float32
// accumulation, K whole, batches in grid.z. Needs m, n, k >= 1 and a device of compute
// capability 8.0 or later. Queued on `stream`.
void mma_gemm(const GemmProblem& p, GemmKernel kernel, MmaTile tile, cudaStream_t stream);

// The same through cublasSgemm plus an epilogue kernel for bias/ReLU (cublas_gemm.cu).
// Needs m, n, k >= 1 and dtype float32 (linear.cu stages 16-bit operands through float32 copies
// for it); `handle` is bound to the stream the epilogue runs on.
void cublas_sgemm(const GemmProblem& p, cublasHandle_t handle, cudaStream_t stream);

// C[i, j] = act((accumulate ? C[i, j] : 0) + (bias ? bias[j] : 0)) over [m, n] with row stride
// ldc, C and bias of `dtype` (float32, bfloat16 or float16; computed in float32, rounded once)
// (cublas_gemm.cu): the cuBLAS path's epilogue, and the whole product when K = 0. act is ReLU
// when relu, or GELU in gelu_form into gelu_out (C's layout) when gelu_out is set.
void bias_activation(DType dtype, void* c, int64_t m, int64_t n, int64_t ldc, const void* bias, bool relu,
                     bool accumulate, cudaStream_t stream, void* gelu_out = nullptr,
                     GeluApproximate gelu_form = GeluApproximate::None);

}  // namespace minidl::cuda
