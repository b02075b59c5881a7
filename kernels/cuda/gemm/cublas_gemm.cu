// The cuBLAS baseline of the CUDA GEMM: the same row-major problem as simt_gemm.cu (gemm.h,
// GemmProblem) through cublasSgemm in plain fp32, then bias and ReLU or GELU in a small epilogue
// kernel.
// float32 operands only: linear.cu gives this path 16-bit products as float32 copies (HalfStaging).
//
// Note [row-major through column-major cuBLAS]
// cuBLAS reads matrices column-major. A row-major matrix X [r, c] with row stride ld occupies
// exactly the bytes of a column-major [c, r] matrix with leading dimension ld, that is, of Xᵀ.
// So the row-major C[M, N] is, to cuBLAS, Cᵀ [N, M] with ldc, and we ask for
//     Cᵀ = (op(A) · op(B))ᵀ = op(B)ᵀ · op(A)ᵀ,
// an (N × K)·(K × M) product: cuBLAS's first operand is our B, its second our A, m = N, n = M.
// The stored B is, to cuBLAS, Bᵀ when it is [K, N] — already op(B)ᵀ, so CUBLAS_OP_N — and
// (Bᵀ)ᵀ = op(B) when it is [N, K] (trans_b), which needs CUBLAS_OP_T; likewise for A. The
// leading dimensions pass through unchanged. No data moves.
//
// Precision: the handle (CudaBackend::cublas) keeps CUBLAS_DEFAULT_MATH, so cublasSgemm computes
// in fp32 (CUBLAS_COMPUTE_32F) without TF32 tensor cores: the honest baseline for an fp32 kernel.
//
// bias_activation: C[i, j] = act((accumulate ? C[i, j] : 0) + bias[j]) over [m, n] with row
// stride ldc, C and bias float32 or 16-bit (half.cuh: widened on load, float32 math, one rounding
// on store; epilogue.cuh). Blocks of 32×8 threads: x runs along a row (coalesced), y over rows; both loops
// grid-stride so any m, n fit the grid limits.
#include "kernels/cuda/gemm/gemm.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/epilogue.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kEpilogueCols = 32;  // threads along a row
constexpr int kEpilogueRows = 8;   // rows per block pass

// ---- kernels ----

template <typename T>
__global__ void bias_activation_kernel(T* __restrict__ c, int64_t m, int64_t n, int64_t ldc,
                                       const T* __restrict__ bias, bool accumulate, T* __restrict__ gelu_out,
                                       EpilogueAct act) {
  for (int64_t i = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; i < m;
       i += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t at = i * ldc + j;  // element (i, j) of C [m, n]
      float v = accumulate ? to_float(c[at]) : 0.0f;
      if (bias != nullptr) v += to_float(bias[j]);
      store_epilogue(c, gelu_out, at, v, act);
    }
  }
}

}  // namespace

// ---- launchers ----

void bias_activation(DType dtype, void* c, int64_t m, int64_t n, int64_t ldc, const void* bias, bool relu,
                     bool accumulate, cudaStream_t stream, void* gelu_out, GeluApproximate gelu_form) {
  if (m == 0 || n == 0) return;
  if (accumulate && bias == nullptr && !relu && gelu_out == nullptr) return;  // identity
  GemmProblem p;  // its activation only
  p.relu = relu;
  p.gelu_out = gelu_out;
  p.gelu_form = gelu_form;
  const EpilogueAct act = epilogue_act(p);
  const dim3 block(kEpilogueCols, kEpilogueRows);
  const int64_t grid_x = std::min<int64_t>(ceil_div(n, kEpilogueCols), 1024);
  const int64_t grid_y = std::min<int64_t>(ceil_div(m, kEpilogueRows), 65535);
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  dispatch_float_and_half(dtype, [&](auto tag) {
    using T = decltype(tag);
    MINIDL_LAUNCH(bias_activation_kernel<T>, grid, block, 0, stream, static_cast<T*>(c), m, n, ldc,
                  static_cast<const T*>(bias), accumulate, static_cast<T*>(gelu_out), act);
  });
}

void cublas_sgemm(const GemmProblem& p, cublasHandle_t handle, cudaStream_t stream) {
  MINIDL_INTERNAL_ASSERT(p.m >= 1 && p.n >= 1 && p.k >= 1, "M, N, K = ", p.m, ", ", p.n, ", ", p.k);  // run_gemm
  MINIDL_INTERNAL_ASSERT(p.dtype == DType::Float32, "cublas_sgemm of ", p.dtype);  // linear.cu stages 16 bits
  MINIDL_CHECK(p.m <= kMaxGemmDim && p.n <= kMaxGemmDim && p.k <= kMaxGemmDim && p.lda <= INT_MAX &&
                   p.ldb <= INT_MAX && p.ldc <= INT_MAX,
               "cublas_sgemm: M, N, K = ", p.m, ", ", p.n, ", ", p.k, " and leading dimensions ", p.lda, ", ", p.ldb,
               ", ", p.ldc, " must fit cuBLAS's int (dimensions up to ", kMaxGemmDim, ")");
  const float one = 1.0f, zero = 0.0f;
  const cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.lda), ldb = static_cast<int>(p.ldb), ldc = static_cast<int>(p.ldc);
  const float* const a = static_cast<const float*>(p.a);  // [M, K] or [K, M]
  const float* const b = static_cast<const float*>(p.b);  // [K, N] or [N, K]
  float* const c = static_cast<float*>(p.c);              // [M, N]
  // Note [row-major through column-major cuBLAS]: Cᵀ[N, M] = op(B)ᵀ · op(A)ᵀ, per product.
  if (p.batch == 1) {
    MINIDL_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, n, m, k, &one, b, ldb, a, lda, &zero, c, ldc));
    if (profiler::active()) profiler::note_launch();  // a library call counts as one launch
  } else {
    // cuBLAS takes an int batch count: chunks of at most INT_MAX products.
    for (int64_t first = 0; first < p.batch; first += INT_MAX) {
      const int count = static_cast<int>(std::min<int64_t>(p.batch - first, INT_MAX));
      MINIDL_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, n, m, k, &one, b + first * p.stride_b, ldb,
                                                    p.stride_b, a + first * p.stride_a, lda, p.stride_a, &zero,
                                                    c + first * p.stride_c, ldc, p.stride_c, count));
      if (profiler::active()) profiler::note_launch();
    }
  }
  for (int64_t i = 0; i < p.batch; ++i)  // returns at once when there is neither bias nor activation
    bias_activation(DType::Float32, c + i * p.stride_c, p.m, p.n, p.ldc, p.bias, p.relu, /*accumulate=*/true, stream,
                    p.gelu_out != nullptr ? static_cast<float*>(p.gelu_out) + i * p.stride_c : nullptr, p.gelu_form);
}

}  // namespace minidl::cuda
