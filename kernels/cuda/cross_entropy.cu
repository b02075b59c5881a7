// Softmax-cross-entropy in the CUDA backend (float32), over logits x [N, C] with targets t [N]
// int64 in [0, C) or equal to ignore_index (the op layer checks them first, through check_targets),
// label smoothing ε:
//   forward   loss[r] = (1 - ε)·(log s[r] - (x[r, t[r]] - m[r])) + ε·(log s[r] - Σ_j (x[r, j] - m[r]) / C),
//             m[r] = max_j x[r, j], s[r] = Σ_j exp(x[r, j] - m[r]);  stats[r] = (m[r], 1/s[r]) kept for
//             backward; 0 for an ignored row
//   backward  dx[r, j] = exp(x[r, j] - m[r]) · (1/s[r]) · scale - ((1 - ε)·(j == t[r]) + ε/C) · scale,
//             scale = scale[r or 0]; 0 for an ignored row
//   mean scale  1 / (the number of rows not ignored), one small kernel, on the device
//   fused     both in one kernel: Note [fused cross-entropy] in core/ops/softmax.cpp
//   (the loss is -log_softmax(x)[t] and p = softmax(x), never through lse = m + log s rounded to
//   float: Note [softmax at the logits' scale] in core/ops/softmax.cpp)
//   check_targets / find_invalid_target: the first row whose target lies outside [0, C), and its
//                 value, for the op's error.
// Strategy: the three losses are row ops of the row engine (row_engine.cuh): forward reduces the
// log-sum-exp and writes per row only (finish), backward is given the stats and maps every element,
// fused does both. Ignoring a row and smoothing cost the default path (ε = 0) two compares per row
// and one subtraction of 0 per element. With ε > 0 the loss also needs Σ_j (x_j - m) per row: a
// block-per-row kernel forms it first (one more read of the logits, only then), from the same max m
// the row engine finds (a max is exact in any order). The target check is a grid-stride scan with
// an atomicMin over one word; the mean scale is one block counting the rows not ignored.
//
// Note [deferred target errors]: waiting for the target check on every loss would stop the host
// from running ahead of the device (a stream sync per training step). So check_targets only
// queues the scan, into one of kMaxDeferredChecks slots {first bad row, its value} in device
// memory, and keeps the op's message; raise_deferred_errors() reads the slots at the next point
// where the host waits for this device anyway (synchronize(), a copy to the host: item(),
// to_vector, .to(cpu)) and throws the first error, the same minidl::Error the CPU throws at once.
// Until then the loss kernels see the bad target and produce NaN for its row (no read out of
// bounds); the device stays usable. When every slot is in use, check_targets waits (synchronize)
// before it takes one, so a loop that never waits still reports within kMaxDeferredChecks losses.
// A loss inside a CUDA graph capture is not checked (graph.cu): its bad rows only read as NaN.
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <mutex>

#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_engine.cuh"

namespace minidl::cuda {

namespace {

constexpr int kTargetThreads = 256;

// ---- the row ops ----

// What every cross-entropy op knows of the targets and the options.
struct CeParams {
  const int64_t* targets;
  int64_t ignore_index;
  float eps;                  // label smoothing ε
  int64_t cols;               // C
  const float* shifted_sum;   // [rows] Σ_j (x_j - m) when eps > 0, else nullptr
};

// The row's context for a gradient scale: the target distribution's weights, or skip when ignored.
__device__ inline RowCtx ce_row(const CeParams& p, int64_t r, float scale) {
  RowCtx c;
  const int64_t t = p.targets[r];
  if (t == p.ignore_index) {
    c.skip = true;
    return c;
  }
  c.target = t;
  c.scale = scale;
  // ε = 0: target_w = 1·scale = scale exactly and class_w = 0, the unsmoothed bits.
  c.target_w = (1.0f - p.eps) * scale;
  c.class_w = p.eps / static_cast<float>(p.cols) * scale;
  return c;
}

// loss[r] = (1 - ε)·nll + ε·smooth (ε = 0: nll itself), 0 for an ignored row. A target outside
// [0, cols) (the op layer checks first, so only a caller that skipped the check) gives a NaN loss
// rather than a read out of bounds.
__device__ inline void write_ce_loss(float* loss, int64_t r, const float* row, const RowStat& st, const RowCtx& c,
                                     const CeParams& p) {
  if (c.skip) {
    loss[r] = 0.0f;
    return;
  }
  if (c.target < 0 || c.target >= p.cols) {
    loss[r] = __int_as_float(0x7fc00000);
    return;
  }
  const float nll = st.log_s - (row[c.target] - st.m);
  if (p.eps == 0.0f) {
    loss[r] = nll;
    return;
  }
  const float smooth = st.log_s - p.shifted_sum[r] / static_cast<float>(p.cols);
  loss[r] = (1.0f - p.eps) * nll + p.eps * smooth;
}

// (p - q) · scale, with the CPU's rounding: p·scale first, then class_w and target_w subtracted.
__device__ inline float ce_grad(float p, int64_t j, const RowCtx& c) {
  if (c.skip) return 0.0f;
  float d = p * c.scale - c.class_w;
  if (j == c.target) d -= c.target_w;
  return d;
}

struct CrossEntropyForward : RowIO {  // a = logits
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = false, kMapFromExp = false;
  CeParams p;
  float* loss;
  float* stats_out;  // [rows, 2]: (m, 1/s) per row
  __device__ RowCtx row(int64_t r) const { return ce_row(p, r, 1.0f); }
  __device__ void finish(int64_t r, const float* row, const RowStat& st, const RowCtx& c) const {
    write_ce_loss(loss, r, row, st, c, p);
    stats_out[2 * r] = st.m;
    stats_out[2 * r + 1] = st.inv_s;
  }
};

struct CrossEntropyBackward : RowIO {  // a = logits, out = dlogits; the forward's stats given
  static constexpr RowReduce kReduce = RowReduce::None;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = false;
  CeParams p;
  const float* stats;  // [rows, 2]: (m, 1/s) per row
  const float* scale;
  int64_t scale_stride;  // 1: one scale per row; 0: one scale for all rows
  __device__ RowCtx row(int64_t r) const {
    RowCtx c = ce_row(p, r, scale[r * scale_stride]);
    c.stat.m = stats[2 * r];
    c.stat.inv_s = stats[2 * r + 1];
    return c;
  }
  __device__ float map(float x, float, int64_t j, const RowStat& st, const RowCtx& c) const {
    return ce_grad(expf(x - st.m) * st.inv_s, j, c);
  }
  __device__ void finish(int64_t, const float*, const RowStat&, const RowCtx&) const {}
};

struct CrossEntropyFused : RowIO {  // a = logits, out = dlogits
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = true;
  CeParams p;
  float* loss;
  const float* scale;  // one element (the mean's 1/count), or nullptr for 1
  __device__ RowCtx row(int64_t r) const { return ce_row(p, r, scale != nullptr ? *scale : 1.0f); }
  __device__ float map(float x, float, int64_t j, const RowStat& st, const RowCtx& c) const {
    return ce_grad(expf(x - st.m) * st.inv_s, j, c);
  }
  __device__ float map_exp(float p, int64_t j, const RowCtx& c) const { return ce_grad(p, j, c); }
  __device__ void finish(int64_t r, const float* row, const RowStat& st, const RowCtx& c) const {
    write_ce_loss(loss, r, row, st, c, p);
  }
};

// ---- kernels ----

constexpr int kShiftedSumThreads = 256;
constexpr int kCountThreads = 1024;

// out[r] = Σ_j (x[r, j] - m[r]) with m[r] = max_j x[r, j], a block per row (grid-stride over rows):
// the max first, then the shifted sum, both reduced over the block in a fixed order.
__global__ void __launch_bounds__(kShiftedSumThreads)
    shifted_row_sum_kernel(const float* __restrict__ x, int64_t rows, int64_t cols, float* __restrict__ out) {
  __shared__ float scratch[kWarpSize];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;  // [cols]
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
    m = warp_max(m);
    __syncthreads();  // scratch may still be read by the previous row
    if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = m;
    __syncthreads();
    m = threadIdx.x % kWarpSize < blockDim.x / kWarpSize ? scratch[threadIdx.x % kWarpSize] : -INFINITY;
    m = warp_max(m);
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc += row[j] - m;
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[r] = acc;
  }
}

// scale[0] = 1 / (the number of i with targets[i] != ignore_index), +inf when there is none: one
// block; integer counts, so the order of the additions does not matter.
__global__ void __launch_bounds__(kCountThreads)
    mean_scale_kernel(const int64_t* __restrict__ targets, int64_t n, int64_t ignore_index, float* __restrict__ scale) {
  __shared__ unsigned long long counts[kCountThreads];
  unsigned long long mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mine += targets[i] != ignore_index ? 1 : 0;
  counts[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) scale[0] = counts[0] > 0 ? static_cast<float>(1.0 / static_cast<double>(counts[0])) : INFINITY;
}

// The smallest i with targets[i] outside [0, classes) and not ignore_index (when has_ignore), as an atomicMin over one word that the
// host set to ULLONG_MAX (min is order-independent, so the answer is deterministic). Each
// thread walks its indices in increasing order and stops at its first bad one.
__global__ void __launch_bounds__(kTargetThreads)
    first_invalid_target_kernel(const int64_t* __restrict__ targets, int64_t n, int64_t classes, bool has_ignore,
                                int64_t ignore_index, unsigned long long* __restrict__ first_bad) {
  unsigned long long mine = ULLONG_MAX;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = targets[i];
    if ((t < 0 || t >= classes) && !(has_ignore && t == ignore_index)) {
      mine = static_cast<unsigned long long>(i);
      break;
    }
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, mine, offset);
    mine = other < mine ? other : mine;
  }
  if (threadIdx.x % kWarpSize == 0 && mine != ULLONG_MAX) atomicMin(first_bad, mine);
}

// slot = {first bad row, value}: the value is read once the scan has lowered slot[0].
__global__ void invalid_target_value_kernel(const int64_t* __restrict__ targets,
                                            unsigned long long* __restrict__ slot) {
  if (slot[0] != ULLONG_MAX) slot[1] = static_cast<unsigned long long>(targets[slot[0]]);
}

// ---- host helpers ----

// What the op layer guarantees for every loss method: contiguous float32 logits [rows, cols]
// (and the tensors of that shape), contiguous int64 targets [rows], per-row tensors of rows.
inline bool loss_arguments(const Tensor& logits, const Tensor& targets,
                           std::initializer_list<const Tensor*> like_logits,
                           std::initializer_list<const Tensor*> per_row) {
  if (logits.dim() != 2 || logits.dtype() != DType::Float32 || !logits.is_contiguous()) return false;
  const int64_t rows = logits.shape()[0];
  if (targets.dtype() != DType::Int64 || targets.numel() != rows || !targets.is_contiguous()) return false;
  for (const Tensor* t : like_logits)
    if (t->shape() != logits.shape()) return false;
  for (const Tensor* t : per_row)
    if (t->numel() != rows) return false;
  return all_float32(like_logits) && all_contiguous(like_logits) && all_float32(per_row) && all_contiguous(per_row);
}

// The per-row statistics forward keeps for backward: contiguous float32 [rows, 2], (m, 1/s).
inline bool row_stats(const Tensor& stats, const Tensor& logits) {
  return stats.dtype() == DType::Float32 && stats.is_contiguous() && stats.dim() == 2 &&
         stats.shape()[0] == logits.shape()[0] && stats.shape()[1] == 2;
}

}  // namespace

// ---- launchers ----

std::optional<std::pair<int64_t, int64_t>> CudaBackend::find_invalid_target(const Tensor& targets,
                                                                            int64_t num_classes,
                                                                            std::optional<int64_t> ignore_index) {
  MINIDL_INTERNAL_ASSERT(targets.dtype() == DType::Int64 && targets.is_contiguous());
  refuse_in_capture("the check of a loss's targets", "the host reads its result");
  const int64_t n = targets.numel();
  if (n == 0) return std::nullopt;
  DeviceGuard guard(device_index());
  // One word on the device: ULLONG_MAX (all bits set) until a bad row lowers it.
  Tensor first = empty(Shape{1}, TensorOptions(DType::Int64, device()));
  auto* first_ptr = static_cast<unsigned long long*>(first.raw_data());
  MINIDL_CUDA_CHECK(cudaMemsetAsync(first_ptr, 0xFF, sizeof(unsigned long long), stream()));
  const unsigned blocks = grid_for(n, kTargetThreads, multiprocessor_count(), 4);
  MINIDL_LAUNCH(first_invalid_target_kernel, blocks, kTargetThreads, 0, stream(), targets.data<int64_t>(), n,
                num_classes, ignore_index.has_value(), ignore_index.value_or(0), first_ptr);
  unsigned long long row = 0;
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(&row, first_ptr, sizeof(row), cudaMemcpyDeviceToHost, stream()));
  MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream()));
  if (row == ULLONG_MAX) return std::nullopt;
  int64_t value = 0;
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(&value, targets.data<int64_t>() + row, sizeof(value), cudaMemcpyDeviceToHost,
                                    stream()));
  MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return std::make_pair(static_cast<int64_t>(row), value);
}

void CudaBackend::check_targets(const Tensor& targets, int64_t num_classes, TargetErrorMessage message,
                                std::optional<int64_t> ignore_index) {
  MINIDL_INTERNAL_ASSERT(targets.dtype() == DType::Int64 && targets.is_contiguous());
  const int64_t n = targets.numel();
  // Not in a graph capture: a replay would rewrite a slot whose message the host has long
  // consumed. A captured step's bad target still gives its row a NaN loss.
  if (n == 0 || capturing()) return;
  DeviceGuard guard(device_index());
  std::unique_lock<std::mutex> lock(deferred_mutex_);
  while (deferred_messages_.size() == static_cast<size_t>(kMaxDeferredChecks)) {
    lock.unlock();
    synchronize();  // reads (and frees) the slots, throwing an earlier check's error if it found one
    lock.lock();
  }
  if (deferred_slots_ == nullptr) {
    MINIDL_CUDA_CHECK(cudaMalloc(&deferred_slots_, 2 * sizeof(unsigned long long) * kMaxDeferredChecks));
  }
  unsigned long long* slot = deferred_slots_ + 2 * deferred_messages_.size();
  // Both words, row and value, all bits set: no bad row yet. The value is written only with a bad
  // row, but raise_deferred_errors() copies both, so both must hold something (compute-sanitizer's
  // initcheck reports a copy of bytes never written).
  MINIDL_CUDA_CHECK(cudaMemsetAsync(slot, 0xFF, 2 * sizeof(unsigned long long), stream()));
  const unsigned blocks = grid_for(n, kTargetThreads, multiprocessor_count(), 4);
  MINIDL_LAUNCH(first_invalid_target_kernel, blocks, kTargetThreads, 0, stream(), targets.data<int64_t>(), n,
                num_classes, ignore_index.has_value(), ignore_index.value_or(0), slot);
  MINIDL_LAUNCH(invalid_target_value_kernel, 1, 1, 0, stream(), targets.data<int64_t>(), slot);
  deferred_messages_.push_back(std::move(message));
}

namespace {

// The targets and options every loss launcher passes to its row op; with ε > 0 also the per-row
// Σ_j (x_j - m) of the logits, formed first into `shifted` (a [rows] tensor the caller keeps alive
// until its launch is queued: the caching allocator orders the reuse after it).
CeParams ce_params(const CudaBackend& be, const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& o,
                   Tensor& shifted) {
  const int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  CeParams p{targets.data<int64_t>(), o.ignore_index, static_cast<float>(o.label_smoothing), cols, nullptr};
  if (o.label_smoothing != 0.0 && rows > 0 && cols > 0) {
    shifted = empty(Shape{rows}, logits.options());
    MINIDL_LAUNCH(shifted_row_sum_kernel, row_engine::row_grid(rows), kShiftedSumThreads, 0, be.stream(), logits.data<float>(),
                  rows, cols, shifted.data<float>());
    p.shifted_sum = shifted.data<float>();
  }
  return p;
}

}  // namespace

void CudaBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss,
                                                Tensor& stats, const CrossEntropyOptions& o) {
  if (HalfStaging::needed({&logits, &loss, &stats})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    softmax_cross_entropy_forward(s.in(logits), targets, s.out(loss), s.out(stats), o);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(loss_arguments(logits, targets, {}, {&loss}) && row_stats(stats, logits));
  DeviceGuard guard(device_index());
  Tensor shifted;
  CrossEntropyForward op;
  op.a = logits.data<float>();
  op.p = ce_params(*this, logits, targets, o, shifted);
  op.loss = loss.data<float>();
  op.stats_out = stats.data<float>();
  launch_rows(*this, op, logits.shape()[0], logits.shape()[1]);
}

void CudaBackend::softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                                 const Tensor& scale, Tensor& dlogits, const CrossEntropyOptions& o) {
  if (HalfStaging::needed({&logits, &stats, &scale, &dlogits})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    softmax_cross_entropy_backward(s.in(logits), targets, s.in(stats), s.in(scale), s.out(dlogits), o);
    return s.commit();
  }
  // scale: one value per row (Reduction::None) or one for all rows; the engine checked g's shape.
  MINIDL_INTERNAL_ASSERT(loss_arguments(logits, targets, {&dlogits}, {}) && row_stats(stats, logits));
  MINIDL_INTERNAL_ASSERT(scale.dtype() == DType::Float32 && scale.is_contiguous() &&
                         (scale.numel() == 1 || scale.numel() == logits.shape()[0]));
  DeviceGuard guard(device_index());
  CrossEntropyBackward op;
  op.a = logits.data<float>();
  op.out = dlogits.data<float>();
  // The gradient needs no Σ (x - m): the smoothing is in the weights of ce_row alone.
  op.p = CeParams{targets.data<int64_t>(), o.ignore_index, static_cast<float>(o.label_smoothing), logits.shape()[1],
                  nullptr};
  op.stats = stats.data<float>();
  op.scale = scale.data<float>();
  op.scale_stride = scale.numel() > 1 ? 1 : 0;
  launch_rows(*this, op, logits.shape()[0], logits.shape()[1]);
}

// Note [fused cross-entropy] (core/ops/softmax.cpp). This method is one kernel launch: loss
// and dlogits for every row ([4096, 10]: one warp per row, 512 blocks), two with label smoothing
// (the shifted row sums first). The op around it, ops::softmax_cross_entropy with the Mean
// reduction, adds on this stream: check_targets before (a memset and two small kernels, no host
// wait: Note [deferred target errors]) and the mean scale (one kernel counting the rows not
// ignored, read by this kernel on the device), then sum_dim over the N losses (one kernel while
// N < 32768) and the in-place multiply by the mean scale (one kernel): 6 kernels per loss in all.
// The backward of a loss seeded with the implicit 1 launches nothing (dlogits are returned as is).
void CudaBackend::softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& scale,
                                              Tensor& loss, Tensor& dlogits, const CrossEntropyOptions& o) {
  if (HalfStaging::needed({&logits, &scale, &loss, &dlogits})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    softmax_cross_entropy_fused(s.in(logits), targets, s.in(scale), s.out(loss), s.out(dlogits), o);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(loss_arguments(logits, targets, {&dlogits}, {&loss}));
  MINIDL_INTERNAL_ASSERT(!scale.defined() || (scale.dtype() == DType::Float32 && scale.numel() == 1));
  DeviceGuard guard(device_index());
  Tensor shifted;
  CrossEntropyFused op;
  op.a = logits.data<float>();
  op.out = dlogits.data<float>();
  op.p = ce_params(*this, logits, targets, o, shifted);
  op.loss = loss.data<float>();
  op.scale = scale.defined() ? scale.data<float>() : nullptr;
  launch_rows(*this, op, logits.shape()[0], logits.shape()[1]);
}

void CudaBackend::cross_entropy_mean_scale(const Tensor& targets, int64_t ignore_index, Tensor& scale) {
  if (HalfStaging::needed({&scale})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    cross_entropy_mean_scale(targets, ignore_index, s.out(scale));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(targets.dtype() == DType::Int64 && targets.is_contiguous() &&
                         scale.dtype() == DType::Float32 && scale.numel() == 1);
  DeviceGuard guard(device_index());
  MINIDL_LAUNCH(mean_scale_kernel, 1, kCountThreads, 0, stream(), targets.data<int64_t>(), targets.numel(),
                ignore_index, scale.data<float>());
}

}  // namespace minidl::cuda
