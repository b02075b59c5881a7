// Softmax-cross-entropy in the CUDA backend (float32), over logits x [N, C] with targets t [N]
// int64 in [0, C) (the op layer checks them first, through find_invalid_target):
//   forward   loss[r] = log s[r] - (x[r, t[r]] - m[r]),  m[r] = max_j x[r, j],
//             s[r] = Σ_j exp(x[r, j] - m[r]);  stats[r] = (m[r], 1/s[r]) kept for backward
//   backward  dx[r, j] = exp(x[r, j] - m[r]) · (1/s[r]) · scale[r or 0] - (j == t[r]) · scale
//   fused     both in one kernel: Note [fused cross-entropy] in core/ops/softmax.cpp
//   (the loss is -log_softmax(x)[t] and p = softmax(x), never through lse = m + log s rounded to
//   float: Note [softmax at the logits' scale] in core/ops/softmax.cpp)
//   check_targets / find_invalid_target: the first row whose target lies outside [0, C), and its
//                 value, for the op's error.
// Strategy: the three losses are row ops of the row engine (row_engine.cuh): forward reduces the
// log-sum-exp and writes per row only (finish), backward is given the stats and maps every element,
// fused does both. The target check is a grid-stride scan with an atomicMin over one word.
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
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <mutex>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_engine.cuh"

namespace minidl::cuda {

namespace {

constexpr int kTargetThreads = 256;

// ---- the row ops ----

// loss[r] = log s - (x[r, t] - m). A target outside [0, cols) (the op layer checks first, so only
// a caller that skipped the check) gives a NaN loss rather than a read out of bounds.
__device__ inline void write_ce_loss(float* loss, int64_t r, const float* row, const RowStat& st, int64_t target,
                                     int64_t cols) {
  loss[r] = (target >= 0 && target < cols) ? st.log_s - (row[target] - st.m) : __int_as_float(0x7fc00000);
}

// (p - onehot) · scale, with the CPU's rounding: p·scale first, then scale subtracted.
__device__ inline float ce_grad(float p, int64_t j, const RowCtx& c) {
  float d = p * c.scale;
  if (j == c.target) d -= c.scale;
  return d;
}

struct CrossEntropyForward : RowIO {  // a = logits
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = false, kMapFromExp = false;
  const int64_t* targets;
  float* loss;
  float* stats_out;  // [rows, 2]: (m, 1/s) per row
  int64_t cols;
  __device__ RowCtx row(int64_t r) const { return {targets[r], 1.0f, {}}; }
  __device__ void finish(int64_t r, const float* row, const RowStat& st, const RowCtx& c) const {
    write_ce_loss(loss, r, row, st, c.target, cols);
    stats_out[2 * r] = st.m;
    stats_out[2 * r + 1] = st.inv_s;
  }
};

struct CrossEntropyBackward : RowIO {  // a = logits, out = dlogits; the forward's stats given
  static constexpr RowReduce kReduce = RowReduce::None;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = false;
  const int64_t* targets;
  const float* stats;  // [rows, 2]: (m, 1/s) per row
  const float* scale;
  int64_t scale_stride;  // 1: one scale per row; 0: one scale for all rows
  __device__ RowCtx row(int64_t r) const {
    RowCtx c{targets[r], scale[r * scale_stride], {}};
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
  const int64_t* targets;
  float* loss;
  float scale;
  int64_t cols;
  __device__ RowCtx row(int64_t r) const { return {targets[r], scale, {}}; }
  __device__ float map(float x, float, int64_t j, const RowStat& st, const RowCtx& c) const {
    return ce_grad(expf(x - st.m) * st.inv_s, j, c);
  }
  __device__ float map_exp(float p, int64_t j, const RowCtx& c) const { return ce_grad(p, j, c); }
  __device__ void finish(int64_t r, const float* row, const RowStat& st, const RowCtx& c) const {
    write_ce_loss(loss, r, row, st, c.target, cols);
  }
};

// ---- kernels ----

// The smallest i with targets[i] outside [0, classes), as an atomicMin over one word that the
// host set to ULLONG_MAX (min is order-independent, so the answer is deterministic). Each
// thread walks its indices in increasing order and stops at its first bad one.
__global__ void __launch_bounds__(kTargetThreads)
    first_invalid_target_kernel(const int64_t* __restrict__ targets, int64_t n, int64_t classes,
                                unsigned long long* __restrict__ first_bad) {
  unsigned long long mine = ULLONG_MAX;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = targets[i];
    if (t < 0 || t >= classes) {
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
                                                                            int64_t num_classes) {
  MINIDL_INTERNAL_ASSERT(targets.dtype() == DType::Int64 && targets.is_contiguous());
  const int64_t n = targets.numel();
  if (n == 0) return std::nullopt;
  DeviceGuard guard(device_index());
  // One word on the device: ULLONG_MAX (all bits set) until a bad row lowers it.
  Tensor first = empty(Shape{1}, TensorOptions(DType::Int64, device()));
  auto* first_ptr = static_cast<unsigned long long*>(first.raw_data());
  MINIDL_CUDA_CHECK(cudaMemsetAsync(first_ptr, 0xFF, sizeof(unsigned long long), stream()));
  const unsigned blocks = grid_for(n, kTargetThreads, multiprocessor_count(), 4);
  MINIDL_LAUNCH(first_invalid_target_kernel, blocks, kTargetThreads, 0, stream(), targets.data<int64_t>(), n,
                num_classes, first_ptr);
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

void CudaBackend::check_targets(const Tensor& targets, int64_t num_classes, TargetErrorMessage message) {
  MINIDL_INTERNAL_ASSERT(targets.dtype() == DType::Int64 && targets.is_contiguous());
  const int64_t n = targets.numel();
  if (n == 0) return;
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
                num_classes, slot);
  MINIDL_LAUNCH(invalid_target_value_kernel, 1, 1, 0, stream(), targets.data<int64_t>(), slot);
  deferred_messages_.push_back(std::move(message));
}

void CudaBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss,
                                                Tensor& stats) {
  MINIDL_INTERNAL_ASSERT(loss_arguments(logits, targets, {}, {&loss}) && row_stats(stats, logits));
  DeviceGuard guard(device_index());
  CrossEntropyForward op;
  op.a = logits.data<float>();
  op.targets = targets.data<int64_t>();
  op.loss = loss.data<float>();
  op.stats_out = stats.data<float>();
  op.cols = logits.shape()[1];
  launch_rows(*this, op, logits.shape()[0], logits.shape()[1]);
}

void CudaBackend::softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                                 const Tensor& scale, Tensor& dlogits) {
  // scale: one value per row (Reduction::None) or one for all rows; the engine checked g's shape.
  MINIDL_INTERNAL_ASSERT(loss_arguments(logits, targets, {&dlogits}, {}) && row_stats(stats, logits));
  MINIDL_INTERNAL_ASSERT(scale.dtype() == DType::Float32 && scale.is_contiguous() &&
                         (scale.numel() == 1 || scale.numel() == logits.shape()[0]));
  DeviceGuard guard(device_index());
  CrossEntropyBackward op;
  op.a = logits.data<float>();
  op.out = dlogits.data<float>();
  op.targets = targets.data<int64_t>();
  op.stats = stats.data<float>();
  op.scale = scale.data<float>();
  op.scale_stride = scale.numel() > 1 ? 1 : 0;
  launch_rows(*this, op, logits.shape()[0], logits.shape()[1]);
}

// Note [fused cross-entropy] (core/ops/softmax.cpp). This method is one kernel launch: loss
// and dlogits for every row ([4096, 10]: one warp per row, 512 blocks). The op around it,
// ops::softmax_cross_entropy with the Mean reduction, adds on this stream: check_targets before
// (a memset and two small kernels, no host wait: Note [deferred target errors]), then sum_dim
// over the N losses (one kernel while N < 32768), the fill that makes the 1/N scalar (one
// kernel) and the in-place multiply by it (one kernel): 6 kernels per loss in all. The backward
// of a loss seeded with the implicit 1 launches nothing (dlogits are returned as is).
void CudaBackend::softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, double scale, Tensor& loss,
                                              Tensor& dlogits) {
  MINIDL_INTERNAL_ASSERT(loss_arguments(logits, targets, {&dlogits}, {&loss}));
  DeviceGuard guard(device_index());
  CrossEntropyFused op;
  op.a = logits.data<float>();
  op.out = dlogits.data<float>();
  op.targets = targets.data<int64_t>();
  op.loss = loss.data<float>();
  op.scale = static_cast<float>(scale);
  op.cols = logits.shape()[1];
  launch_rows(*this, op, logits.shape()[0], logits.shape()[1]);
}

}  // namespace minidl::cuda
