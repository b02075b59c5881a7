// matmul and linear forward/backward of the CUDA backend: every product is one GemmProblem
// (gemm.h) run by the hand-written kernel (simt_gemm.cu, with a workspace when it splits K) or by
// cuBLAS (cublas_gemm.cu), as minidl::gemm_impl() (gemm_impl.h) says at the time of the call.
// Transposes are flags, never copies.
//
// dtypes: float32, bfloat16 or float16, one for every tensor of a call, with float32 math. The
// hand-written kernel and the column sums read and write the 16-bit tensors directly (widen on
// load, accumulate in float32, round each output once on store). The cuBLAS path calls
// cublasSgemm (the simulated device models cuBLAS's float32 GEMMs only), so there a 16-bit call
// runs on float32 copies of its tensors (kernels/half_staging.h) and rounds its outputs after.
//
//   matmul:   C[M, N] = op(A) · op(B)
//   batched:  C[i] = op(A[i]) · op(B[i]) for i < batch, operands at batch strides (0: broadcast),
//             one launch of the batch (simt_gemm.cu: grid.z) or cuBLAS's strided-batched GEMM
//   forward:  y[N, M] = act(x[N, K] · W[M, K]ᵀ + b[M])   — B = W read transposed, bias and
//             ReLU or GELU fused (a GELU also writes its input z = x·Wᵀ + b for the backward)
//   backward: dx[N, K] = dy[N, M] · W[M, K]               — both as stored
//             dW[M, K] = dy[N, M]ᵀ · x[N, K]              — A = dy read transposed
//             db[M]    = Σ_rows dy                         — column_sum, below
// Empty products: M or N = 0 writes nothing; K = 0 writes C = act(bias) (or 0) without a GEMM.
//
// column_sum (db): out[c] = Σ_r dy[r, c] for dy [R, C] contiguous, in a fixed order, no atomics.
// Stage 1 splits the rows into chunks of kChunkRows; a block of 32×8 threads takes 32 columns of
// one chunk: the 32 lanes of a warp read 32 adjacent columns of a row (coalesced), row lane y sums
// rows y, y+8, ... of the chunk, and lane 0 adds the 8 row-lane sums in order. With one chunk
// (R <= kChunkRows, the training batches) that is the answer; otherwise the chunk sums land in a
// float32 [chunks, C] workspace and stage 2 adds them per column in chunk order. The chunking
// depends on R alone, so a shape always sums in the same order. Sums are float32 whatever dy's
// dtype; a 16-bit db is rounded once, by whichever stage writes it.
#include "core/error.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemm_impl.h"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

#include <algorithm>
#include <initializer_list>

namespace minidl::cuda {

namespace {

constexpr int64_t kChunkRows = 1024;  // rows per stage-1 chunk
constexpr int kSumCols = 32;          // columns per stage-1 block (one warp's width)
constexpr int kSumRowLanes = 8;       // row lanes per stage-1 block
constexpr int kFinalThreads = 256;

// ---- kernels ----

// partial[chunk, c] = Σ_{r in chunk} dy[r, c]; dy [rows, cols] of T, partial [chunks, cols] of
// TOut: float32 chunk sums, or, with one chunk, db itself (TOut = T).
template <typename T, typename TOut>
__global__ void column_sum_chunks_kernel(const T* __restrict__ dy, int64_t rows, int64_t cols, int64_t chunks,
                                         TOut* __restrict__ partial) {
  __shared__ float lane_sums[kSumRowLanes][kSumCols + 1];  // [row lane, column] per chunk
  const int64_t c = blockIdx.x * static_cast<int64_t>(kSumCols) + threadIdx.x;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {  // uniform over the block
    const int64_t r_end = std::min(rows, (chunk + 1) * kChunkRows);
    float s = 0.0f;
    if (c < cols)
      for (int64_t r = chunk * kChunkRows + threadIdx.y; r < r_end; r += kSumRowLanes) s += to_float(dy[r * cols + c]);
    lane_sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      float t = 0.0f;
#pragma unroll
      for (int y = 0; y < kSumRowLanes; ++y) t += lane_sums[y][threadIdx.x];
      partial[chunk * cols + c] = from_float<TOut>(t);
    }
    __syncthreads();  // lane_sums is rewritten for the next chunk
  }
}

// out[c] = Σ_chunk partial[chunk, c], in chunk order, rounded once to out's type T.
template <typename T>
__global__ void column_sum_final_kernel(const float* __restrict__ partial, int64_t chunks, int64_t cols,
                                        T* __restrict__ out) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) s += partial[chunk * cols + c];
    out[c] = from_float<T>(s);
  }
}

// ---- helpers of the launchers ----

// Whether a call runs on float32 copies of its tensors: a 16-bit one on the cuBLAS path.
bool staged_for_cublas(std::initializer_list<const Tensor*> tensors) {
  return gemm_impl() == GemmImpl::Cublas && HalfStaging::needed(tensors);
}

// Runs one product, or a strided batch of them, on `be`'s stream through the implementation
// gemm_impl() names.
void run_gemm(CudaBackend& be, const GemmProblem& p) {
  if (p.m == 0 || p.n == 0) return;
  MINIDL_INTERNAL_ASSERT(p.batch == 1 || p.k >= 1, "a batch with K = 0");  // matmul writes those zeros itself
  if (p.k == 0) {  // the empty sum: C = act(0 + bias)
    bias_activation(p.dtype, p.c, p.m, p.n, p.ldc, p.bias, p.relu, /*accumulate=*/false, be.stream(), p.gelu_out,
                    p.gelu_form);
    return;
  }
  // A 16-bit problem is here only when its caller did not stage it for cuBLAS, so it runs on the
  // native kernel even if another thread has switched gemm_impl() since that caller asked.
  if (gemm_impl() == GemmImpl::Cublas && p.dtype == DType::Float32) {
    cublas_sgemm(p, be.cublas(), be.stream());
    return;
  }
  const GemmKernelChoice choice = choose_gemm_kernel(p.dtype, be.compute_capability_major(),
                                                     be.compute_capability_minor(), p.batch, p.m, p.n,
                                                     be.multiprocessor_count());
  if (gemm_impl() == GemmImpl::Native && choice.kernel != GemmKernel::Simt) {  // 16-bit on tensor cores
    mma_gemm(p, choice.kernel, choice.mma_tile, be.stream());
    return;
  }
  // A split-K plan needs room for its partial products; freed on return and reusable at once,
  // since everything is queued on the one stream (caching_allocator.h, stream-aware frees).
  const int64_t floats = native_batched_gemm_plan(p.batch, p.m, p.n, p.k, be.multiprocessor_count()).workspace_floats();
  const Tensor workspace = floats > 0 ? empty(Shape{floats}, TensorOptions(DType::Float32, be.device())) : Tensor();
  native_sgemm(p, be.multiprocessor_count(), floats > 0 ? workspace.data<float>() : nullptr, be.stream());
}

// out[C] = column sums of dy [R, C], both of dy's dtype (float32 or 16-bit).
void column_sum(CudaBackend& be, const Tensor& dy, Tensor& out) {
  const int64_t rows = dy.shape()[0], cols = dy.shape()[1];
  if (cols == 0) return;
  if (rows == 0) {  // the empty sum
    bias_activation(out.dtype(), out.raw_data(), 1, cols, cols, nullptr, false, /*accumulate=*/false, be.stream());
    return;
  }
  const int64_t chunks = ceil_div(rows, kChunkRows);
  const dim3 block(kSumCols, kSumRowLanes);
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, kSumCols)), static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
  dispatch_float_and_half(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = static_cast<const T*>(dy.raw_data());
    T* dst = static_cast<T*>(out.raw_data());
    if (chunks == 1) {  // the one chunk's sums are the answer
      MINIDL_LAUNCH(column_sum_chunks_kernel<T, T>, grid, block, 0, be.stream(), src, rows, cols, chunks, dst);
      return;
    }
    // float32 chunk sums in a workspace on this device (freed on return and reusable at once, as
    // in run_gemm), then their sum per column.
    const Tensor workspace = empty(Shape{chunks, cols}, TensorOptions(DType::Float32, be.device()));
    float* partial = workspace.data<float>();
    MINIDL_LAUNCH(column_sum_chunks_kernel<T, float>, grid, block, 0, be.stream(), src, rows, cols, chunks, partial);
    const unsigned blocks = grid_for(cols, kFinalThreads, be.multiprocessor_count());
    MINIDL_LAUNCH(column_sum_final_kernel<T>, blocks, kFinalThreads, 0, be.stream(), partial, chunks, cols, dst);
  });
}

// The elements a strided batch of [rows, cols] matrices with row stride ld, `stride` apart,
// reaches from t's first element, as one contiguous 1-D view of t's storage (for staging).
Tensor operand_span(const Tensor& t, int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t span = (batch - 1) * stride + (rows - 1) * ld + cols;
  return make_view(t, Shape{span}, Shape{1}, t.offset());
}

// For the asserts: every defined tensor given is a contiguous matrix, all of one dtype (float32
// or 16-bit).
inline bool same_floating_matrices(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->dim() != 2) return false;
  return same_floating(tensors) && all_contiguous(tensors);
}

}  // namespace

// ---- launchers ----

void CudaBackend::matmul(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) {
  if (staged_for_cublas({&a, &b, &c})) {  // float32 copies for cublasSgemm (kernels/half_staging.h)
    HalfStaging s;
    matmul(s.in(a), s.in(b), s.out(c), trans_a, trans_b);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(same_floating_matrices({&a, &b, &c}));
  DeviceGuard guard(device_index());
  GemmProblem p;
  p.dtype = c.dtype();
  p.m = c.shape()[0];
  p.n = c.shape()[1];
  p.k = trans_a ? a.shape()[0] : a.shape()[1];
  p.a = a.raw_data();
  p.lda = a.shape()[1];  // A stored [M, K], or [K, M] when transposed
  p.trans_a = trans_a;
  p.b = b.raw_data();
  p.ldb = b.shape()[1];  // B stored [K, N], or [N, K] when transposed
  p.trans_b = trans_b;
  p.c = c.raw_data();
  p.ldc = p.n;
  run_gemm(*this, p);
}

void CudaBackend::matmul_batched(const Tensor& a, const Tensor& b, Tensor& c, const BatchedMatmul& bm) {
  if (staged_for_cublas({&a, &b, &c})) {  // float32 copies for cublasSgemm (kernels/half_staging.h)
    // bm locates every matrix by offsets from a's and b's first elements, not by their shapes, so
    // the staged copy of an operand is the whole span those offsets reach, widened in place.
    HalfStaging s;
    const Tensor span_a = operand_span(a, bm.batch, bm.stride_a, bm.trans_a ? bm.k : bm.m, bm.trans_a ? bm.m : bm.k,
                                       bm.lda);
    const Tensor span_b = operand_span(b, bm.batch, bm.stride_b, bm.trans_b ? bm.n : bm.k, bm.trans_b ? bm.k : bm.n,
                                       bm.ldb);
    matmul_batched(s.in(span_a), s.in(span_b), s.out(c), bm);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(same_floating({&a, &b, &c}) && c.is_contiguous() && bm.batch >= 1 && bm.m >= 1 &&
                         bm.n >= 1 && bm.k >= 1);
  DeviceGuard guard(device_index());
  GemmProblem p;
  p.dtype = c.dtype();
  p.m = bm.m;
  p.n = bm.n;
  p.k = bm.k;
  p.a = a.raw_data();
  p.lda = bm.lda;
  p.trans_a = bm.trans_a;
  p.b = b.raw_data();
  p.ldb = bm.ldb;
  p.trans_b = bm.trans_b;
  p.c = c.raw_data();
  p.ldc = p.n;
  p.batch = bm.batch;
  p.stride_a = bm.stride_a;
  p.stride_b = bm.stride_b;
  p.stride_c = bm.m * bm.n;
  run_gemm(*this, p);
}

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, Activation act,
                                 Tensor* pre_activation) {
  if (staged_for_cublas({&x, &w, &bias, &y})) {  // float32 copies for cublasSgemm (kernels/half_staging.h)
    if (is_gelu(act)) {
      // The GELU must read the pre-activation rounded to 16 bits (Activation in core/backend.h),
      // which the float32 copy is not: the product, then a separate GELU on it.
      linear_forward(x, w, bias, *pre_activation, Activation::None, nullptr);
      return gelu_forward(*pre_activation, y, gelu_form(act));
    }
    HalfStaging s;
    linear_forward(s.in(x), s.in(w), s.in(bias), s.out(y), act, nullptr);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(same_floating_matrices({&x, &w, &y}) && same_floating({&y, &bias}) &&
                         all_contiguous({&bias}));
  DeviceGuard guard(device_index());
  GemmProblem p;
  p.dtype = y.dtype();
  p.m = x.shape()[0];  // batch
  p.k = x.shape()[1];  // in features
  p.n = w.shape()[0];  // out features
  p.a = x.raw_data();
  p.lda = p.k;
  p.b = w.raw_data();  // W [out, in] read as Wᵀ [in, out]
  p.ldb = p.k;
  p.trans_b = true;
  p.ldc = p.n;
  p.bias = bias.defined() ? bias.raw_data() : nullptr;
  p.relu = act == Activation::ReLU;
  if (is_gelu(act)) {  // C is the pre-activation, gelu_out y
    p.c = pre_activation->raw_data();
    p.gelu_out = y.raw_data();
    p.gelu_form = gelu_form(act);
  } else {
    p.c = y.raw_data();
  }
  run_gemm(*this, p);
}

void CudaBackend::linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                  Tensor& db) {
  if (staged_for_cublas({&dy, &x, &w, &dx, &dw, &db})) {  // float32 copies for cublasSgemm (kernels/half_staging.h)
    HalfStaging s;
    linear_backward(s.in(dy), s.in(x), s.in(w), s.out(dx), s.out(dw), s.out(db));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(same_floating_matrices({&dy, &x, &w, &dx, &dw}) && same_floating({&dy, &db}) &&
                         all_contiguous({&db}));
  DeviceGuard guard(device_index());
  const int64_t batch = dy.shape()[0], out_features = dy.shape()[1], in_features = x.shape()[1];
  if (dx.defined()) {  // dx[batch, in] = dy[batch, out] · W[out, in]
    GemmProblem p;
    p.dtype = dy.dtype();
    p.m = batch;
    p.n = in_features;
    p.k = out_features;
    p.a = dy.raw_data();
    p.lda = out_features;
    p.b = w.raw_data();
    p.ldb = in_features;
    p.c = dx.raw_data();
    p.ldc = in_features;
    run_gemm(*this, p);
  }
  if (dw.defined()) {  // dW[out, in] = dy[batch, out]ᵀ · x[batch, in]
    GemmProblem p;
    p.dtype = dy.dtype();
    p.m = out_features;
    p.n = in_features;
    p.k = batch;
    p.a = dy.raw_data();  // stored [batch, out]: op(A) = dyᵀ
    p.lda = out_features;
    p.trans_a = true;
    p.b = x.raw_data();
    p.ldb = in_features;
    p.c = dw.raw_data();
    p.ldc = in_features;
    run_gemm(*this, p);
  }
  if (db.defined()) {  // db[out] = Σ_rows dy
    column_sum(*this, dy, db);
  }
}

}  // namespace minidl::cuda
