// The softmax family of the CUDA backend (float32), over the rows of x [rows, cols]:
//   log_softmax:  y = x - lse,  lse = m + log Σ_j exp(x_j - m),  m = max_j x_j
//   softmax:      y = exp(x - lse)
//   backward:     log_softmax  dx = dy - exp(y) · Σ_j dy_j        (y the forward output)
//                 softmax      dx = y · (dy - Σ_j dy_j · y_j)
//   cross-entropy (logits x [N, C], targets t [N] int64 in [0, C), checked first on the host):
//                 forward   loss[r] = lse[r] - x[r, t[r]], lse[r] kept for backward
//                 backward  dx[r, j] = exp(x[r, j] - lse[r]) · scale[r or 0] - (j == t[r]) · scale
//                 fused     both in one kernel: Note [fused cross-entropy] in core/ops/softmax.cpp
//   find_invalid_target: the first row whose target lies outside [0, C), for a host-side error.
//
// Strategy: one kernel template per row strategy, instantiated with a small "row op" that says
// what is reduced over the row (log-sum-exp of x, a sum of f(a, b), or nothing when lse is
// given) and what is written per element; every op of this file is one such struct.
//   cols <= 1024: a warp per row (8 rows per 256-thread block). Lane l keeps row elements
//     l, l + 32, ... in registers (kPerLane of them, a power of 2 >= cols / 32), reduces them,
//     combines the lanes with butterfly shuffles (every lane gets the result), and writes the
//     outputs from registers: the row is read from memory once.
//   cols > 1024: a block per row (256, 512 or 1024 threads as cols grows), float4 loads when
//     every row is 16-byte aligned (cols % 4 == 0 and aligned pointers), scalar otherwise.
//     When the row fits in registers (<= 8 float4 per thread, cols <= 32768) each thread caches
//     its float4s and the row is read once; the softmax-type outputs then reuse exp(x - m_t)
//     from the reduction (m_t the thread's own max), rescaled by exp(m_t - lse): one exp per
//     element instead of two. Longer rows stream twice (reduce, then write), the second read
//     mostly from L2.
//   Log-sum-exp is the online form (Milakov & Gimelshein): each thread keeps (m, s) with
//     s = Σ exp(x - m) and rescales s when m grows; pairs (m1, s1), (m2, s2) merge into
//     (M, s1·exp(m1 - M) + s2·exp(m2 - M)), M = max — symmetric, so the butterfly lanes agree,
//     and the merge order is fixed by the launch shape: results repeat bit for bit.
//   Infinities and NaN follow the CPU: a NaN anywhere makes the row NaN; -inf entries add 0.
#include <climits>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace minidl::cuda {

namespace {

constexpr int kWarpRowsThreads = 256;  // warp-per-row kernels: 8 rows per block
constexpr int kWarpRows = kWarpRowsThreads / kWarpSize;
constexpr int kMaxRowThreads = 1024;   // block-per-row kernels: at most this many threads
constexpr int64_t kWarpMaxCols = 1024;  // rows up to this length take a warp each

enum class RowReduce { LogSumExp, Sum, None };

// Per-row values an op needs besides the row itself (cross-entropy: target, scale, given lse).
struct RowCtx {
  int64_t target = -1;
  float scale = 1.0f;
  float lse = 0.0f;
};

// The row pointers every op has: inputs a (and b for the backward ops), output out.
struct RowIO {
  static constexpr bool kMapFromExp = false;  // the softmax-type ops say true
  const float* a = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
};

// ---- the row ops ----
// kReduce: what the kernel reduces; kTwoInputs: whether b is read; kWrites: whether out is
// written; kMapFromExp: out depends on x only through p = exp(x - lse), so map_exp(p, ...)
// may be fed from the exps already computed for the reduction (cached block path).
// Members: row(r) -> RowCtx; summand(a, b) (Sum); map(a, b, j, stat, ctx) (kWrites; stat is
// lse, the sum, or ctx.lse for None); map_exp(p, j, ctx) (kMapFromExp); finish(r, row_a,
// stat, ctx) by one thread per row. The kernels call only what the flags ask for.

struct LogSoftmaxForward : RowIO {
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = true;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float map(float x, float, int64_t, float lse, const RowCtx&) const { return x - lse; }
  __device__ void finish(int64_t, const float*, float, const RowCtx&) const {}
};

struct SoftmaxForward : RowIO {
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = true;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float map(float x, float, int64_t, float lse, const RowCtx&) const { return expf(x - lse); }
  __device__ float map_exp(float p, int64_t, const RowCtx&) const { return p; }
  __device__ void finish(int64_t, const float*, float, const RowCtx&) const {}
};

struct LogSoftmaxBackward : RowIO {  // a = dy, b = y (log-probabilities)
  static constexpr RowReduce kReduce = RowReduce::Sum;
  static constexpr bool kTwoInputs = true, kWrites = true;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float summand(float dy, float) const { return dy; }
  __device__ float map(float dy, float y, int64_t, float sum, const RowCtx&) const { return dy - expf(y) * sum; }
  __device__ void finish(int64_t, const float*, float, const RowCtx&) const {}
};

struct SoftmaxBackward : RowIO {  // a = dy, b = y (probabilities)
  static constexpr RowReduce kReduce = RowReduce::Sum;
  static constexpr bool kTwoInputs = true, kWrites = true;
  __device__ RowCtx row(int64_t) const { return {}; }
  __device__ float summand(float dy, float y) const { return dy * y; }
  __device__ float map(float dy, float y, int64_t, float sum, const RowCtx&) const { return y * (dy - sum); }
  __device__ void finish(int64_t, const float*, float, const RowCtx&) const {}
};

// loss[r] = lse - x[r, t]. A target outside [0, cols) (the host checks first, so only a caller
// that skipped the check) gives a NaN loss rather than a read out of bounds.
__device__ inline void write_ce_loss(float* loss, int64_t r, const float* row, float lse, int64_t target,
                                     int64_t cols) {
  loss[r] = (target >= 0 && target < cols) ? lse - row[target] : __int_as_float(0x7fc00000);
}

// (p - onehot) · scale, with the CPU's rounding: p·scale first, then scale subtracted.
__device__ inline float ce_grad(float p, int64_t j, const RowCtx& c) {
  float d = p * c.scale;
  if (j == c.target) d -= c.scale;
  return d;
}

struct CrossEntropyForward : RowIO {  // a = logits
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = false;
  const int64_t* targets;
  float* loss;
  float* lse_out;
  int64_t cols;
  __device__ RowCtx row(int64_t r) const { return {targets[r], 1.0f, 0.0f}; }
  __device__ void finish(int64_t r, const float* row, float lse, const RowCtx& c) const {
    write_ce_loss(loss, r, row, lse, c.target, cols);
    lse_out[r] = lse;
  }
};

struct CrossEntropyBackward : RowIO {  // a = logits, out = dlogits; lse given
  static constexpr RowReduce kReduce = RowReduce::None;
  static constexpr bool kTwoInputs = false, kWrites = true;
  const int64_t* targets;
  const float* lse;
  const float* scale;
  int64_t scale_stride;  // 1: one scale per row; 0: one scale for all rows
  __device__ RowCtx row(int64_t r) const { return {targets[r], scale[r * scale_stride], lse[r]}; }
  __device__ float map(float x, float, int64_t j, float lse_r, const RowCtx& c) const {
    return ce_grad(expf(x - lse_r), j, c);
  }
  __device__ void finish(int64_t, const float*, float, const RowCtx&) const {}
};

struct CrossEntropyFused : RowIO {  // a = logits, out = dlogits
  static constexpr RowReduce kReduce = RowReduce::LogSumExp;
  static constexpr bool kTwoInputs = false, kWrites = true, kMapFromExp = true;
  const int64_t* targets;
  float* loss;
  float scale;
  int64_t cols;
  __device__ RowCtx row(int64_t r) const { return {targets[r], scale, 0.0f}; }
  __device__ float map(float x, float, int64_t j, float lse, const RowCtx& c) const {
    return ce_grad(expf(x - lse), j, c);
  }
  __device__ float map_exp(float p, int64_t j, const RowCtx& c) const { return ce_grad(p, j, c); }
  __device__ void finish(int64_t r, const float* row, float lse, const RowCtx& c) const {
    write_ce_loss(loss, r, row, lse, c.target, cols);
  }
};

// ---- log-sum-exp pieces ----

// Adds one value to a running (m, s). v == m adds exp(0) = 1 exactly, and also covers
// v == m == -inf (a row holding -inf entries), where exp(v - m) would be exp(NaN).
__device__ inline void lse_add(float& m, float& s, float v) {
  if (v > m) {
    s = s * expf(m - v) + 1.0f;
    m = v;
  } else {
    s += v == m ? 1.0f : expf(v - m);
  }
}

// Merges (m2, s2) into (m, s). A side already at the max keeps its s unscaled (also the
// m == M == +inf case, where exp(m - M) would be exp(NaN)).
__device__ inline void lse_merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  const float a = m == mm ? s : s * expf(m - mm);
  const float b = m2 == mm ? s2 : s2 * expf(m2 - mm);
  m = mm;
  s = a + b;
}

__device__ inline void warp_lse(float& m, float& s) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    lse_merge(m, s, m2, s2);
  }
}

// (m, s) over the block (blockDim.x a multiple of 32); every thread gets the result.
// scratch_m, scratch_s: 32 floats of shared memory each.
__device__ inline void block_lse(float& m, float& s, float* scratch_m, float* scratch_s) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  warp_lse(m, s);
  __syncthreads();  // the scratch may still be read by the previous row's reduction
  if (lane == 0) {
    scratch_m[warp] = m;
    scratch_s[warp] = s;
  }
  __syncthreads();
  m = lane < warps ? scratch_m[lane] : -INFINITY;
  s = lane < warps ? scratch_s[lane] : 0.0f;
  warp_lse(m, s);
}

// W consecutive floats of a row, moved as one float4 when W == 4.
template <int W>
struct Pack {
  float v[W];
};

template <int W>
__device__ inline Pack<W> load_pack(const float* row, int64_t item) {
  Pack<W> p;
  if constexpr (W == 4) {
    const float4 q = reinterpret_cast<const float4*>(row)[item];
    p.v[0] = q.x;
    p.v[1] = q.y;
    p.v[2] = q.z;
    p.v[3] = q.w;
  } else {
    p.v[0] = row[item];
  }
  return p;
}

template <int W>
__device__ inline void store_pack(float* row, int64_t item, const Pack<W>& p) {
  if constexpr (W == 4) reinterpret_cast<float4*>(row)[item] = make_float4(p.v[0], p.v[1], p.v[2], p.v[3]);
  else row[item] = p.v[0];
}

// Adds a pack to (m, s): the pack's max first (one rescale at most), then its exps.
template <int W>
__device__ inline void lse_add_pack(float& m, float& s, const Pack<W>& p) {
  if constexpr (W == 1) {
    lse_add(m, s, p.v[0]);
  } else {
    float mp = p.v[0];
#pragma unroll
    for (int c = 1; c < W; ++c) mp = fmaxf(mp, p.v[c]);  // NaN is skipped here, and caught below
    if (mp > m) {
      s *= expf(m - mp);
      m = mp;
    }
#pragma unroll
    for (int c = 0; c < W; ++c) s += p.v[c] == m ? 1.0f : expf(p.v[c] - m);
  }
}

// ---- kernels ----

// One warp per row, cols <= 32 * kPerLane; lane l holds elements l + 32k (k < kPerLane).
template <int kPerLane, class Op>
__global__ void __launch_bounds__(kWarpRowsThreads) rows_warp_kernel(Op op, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpRows;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / kWarpSize; r < rows; r += warps) {
    const float* ra = op.a + r * cols;                            // [cols]
    const float* rb = Op::kTwoInputs ? op.b + r * cols : nullptr;  // [cols]
    const RowCtx ctx = op.row(r);
    float ca[kPerLane], cb[kPerLane];  // this lane's elements, in registers
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t j = lane + k * kWarpSize;
      ca[k] = j < cols ? ra[j] : 0.0f;
      if constexpr (Op::kTwoInputs) cb[k] = j < cols ? rb[j] : 0.0f;
      else cb[k] = 0.0f;
    }
    float stat = ctx.lse;
    if constexpr (Op::kReduce == RowReduce::LogSumExp) {
      // From registers: the lane's max first, then independent exps (no rescaling chain).
      float m = -INFINITY, s = 0.0f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k)
        if (lane + k * kWarpSize < cols) m = fmaxf(m, ca[k]);
#pragma unroll
      for (int k = 0; k < kPerLane; ++k)
        if (lane + k * kWarpSize < cols) s += ca[k] == m ? 1.0f : expf(ca[k] - m);
      warp_lse(m, s);
      stat = m + logf(s);
    } else if constexpr (Op::kReduce == RowReduce::Sum) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k)
        if (lane + k * kWarpSize < cols) acc += op.summand(ca[k], cb[k]);
      stat = warp_sum(acc);
    }
    if constexpr (Op::kWrites) {
      float* ro = op.out + r * cols;  // [cols]
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        const int64_t j = lane + k * kWarpSize;
        if (j < cols) ro[j] = op.map(ca[k], cb[k], j, stat, ctx);
      }
    }
    if (lane == 0) op.finish(r, ra, stat, ctx);
  }
}

// One block per row (grid-stride over rows). W = 4: rows are 16-byte aligned and cols % 4 == 0,
// items are float4s; W = 1: items are floats. kCache > 0: thread t caches items t + k·blockDim
// (k < kCache) in registers and the row is read once; kCache == 0: the row streams twice.
template <int W, int kCache, class Op>
__global__ void __launch_bounds__(kMaxRowThreads) rows_block_kernel(Op op, int64_t rows, int64_t cols) {
  __shared__ float scratch_m[kWarpSize], scratch_s[kWarpSize];
  const int64_t items = cols / W;
  const int t = threadIdx.x, threads = blockDim.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* ra = op.a + r * cols;                            // [cols]
    const float* rb = Op::kTwoInputs ? op.b + r * cols : nullptr;  // [cols]
    float* ro = Op::kWrites ? op.out + r * cols : nullptr;         // [cols]
    const RowCtx ctx = op.row(r);
    float stat = ctx.lse;
    if constexpr (kCache > 0) {
      // A cached row has at most kCache * 1024 items: 32-bit indices (fewer registers).
      const int cached_items = static_cast<int>(items);
      Pack<W> ca[kCache], cb[kCache];  // this thread's items, in registers
#pragma unroll
      for (int k = 0; k < kCache; ++k) {
        const int item = t + k * threads;
        if (item < cached_items) {
          ca[k] = load_pack<W>(ra, item);
          if constexpr (Op::kTwoInputs) cb[k] = load_pack<W>(rb, item);
        }
      }
      if constexpr (Op::kReduce == RowReduce::LogSumExp) {
        float m = -INFINITY, s = 0.0f;
#pragma unroll
        for (int k = 0; k < kCache; ++k)
          if (t + k * threads < cached_items)
#pragma unroll
            for (int c = 0; c < W; ++c) m = fmaxf(m, ca[k].v[c]);
        const float m_thread = m;
        // e = exp(x - m_thread): summed here and, for kMapFromExp, kept in place of x.
#pragma unroll
        for (int k = 0; k < kCache; ++k)
          if (t + k * threads < cached_items)
#pragma unroll
            for (int c = 0; c < W; ++c) {
              const float e = ca[k].v[c] == m_thread ? 1.0f : expf(ca[k].v[c] - m_thread);
              s += e;
              if constexpr (Op::kMapFromExp) ca[k].v[c] = e;
            }
        block_lse(m, s, scratch_m, scratch_s);
        stat = m + logf(s);
        if constexpr (Op::kMapFromExp) {
          // p = exp(x - m_thread) · exp(m_thread - lse). A thread whose elements are all -inf
          // kept e = 1 for them; its factor exp(-inf - lse) = 0 makes p = 0 as it should, and
          // for an all -inf row (lse = -inf) it is NaN, as on the CPU (exp(-inf - -inf)). A
          // +inf logit makes m_thread = lse = +inf: factor 1 keeps this thread's finite
          // elements at p = exp(x - inf) = 0 instead of 0 · NaN.
          const float factor = m_thread == INFINITY && stat == INFINITY ? 1.0f : expf(m_thread - stat);
#pragma unroll
          for (int k = 0; k < kCache; ++k) {
            const int item = t + k * threads;
            if (item < cached_items) {
              Pack<W> o;
#pragma unroll
              for (int c = 0; c < W; ++c) o.v[c] = op.map_exp(ca[k].v[c] * factor, item * W + c, ctx);
              store_pack<W>(ro, item, o);
            }
          }
        }
      } else if constexpr (Op::kReduce == RowReduce::Sum) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < kCache; ++k)
          if (t + k * threads < cached_items)
#pragma unroll
            for (int c = 0; c < W; ++c) acc += op.summand(ca[k].v[c], Op::kTwoInputs ? cb[k].v[c] : 0.0f);
        stat = block_sum(acc, scratch_s);
      }
      if constexpr (Op::kWrites && !(Op::kMapFromExp && Op::kReduce == RowReduce::LogSumExp)) {
#pragma unroll
        for (int k = 0; k < kCache; ++k) {
          const int item = t + k * threads;
          if (item < cached_items) {
            Pack<W> o;
#pragma unroll
            for (int c = 0; c < W; ++c)
              o.v[c] = op.map(ca[k].v[c], Op::kTwoInputs ? cb[k].v[c] : 0.0f, item * W + c, stat, ctx);
            store_pack<W>(ro, item, o);
          }
        }
      }
    } else {
      // Streaming: pass 1 reduces, pass 2 re-reads (from L2 for rows that stayed there) and writes.
      if constexpr (Op::kReduce == RowReduce::LogSumExp) {
        float m = -INFINITY, s = 0.0f;
        for (int64_t item = t; item < items; item += threads) lse_add_pack<W>(m, s, load_pack<W>(ra, item));
        block_lse(m, s, scratch_m, scratch_s);
        stat = m + logf(s);
      } else if constexpr (Op::kReduce == RowReduce::Sum) {
        float acc = 0.0f;
        for (int64_t item = t; item < items; item += threads) {
          const Pack<W> pa = load_pack<W>(ra, item);
          Pack<W> pb{};
          if constexpr (Op::kTwoInputs) pb = load_pack<W>(rb, item);
#pragma unroll
          for (int c = 0; c < W; ++c) acc += op.summand(pa.v[c], pb.v[c]);
        }
        stat = block_sum(acc, scratch_s);
      }
      if constexpr (Op::kWrites) {
        for (int64_t item = t; item < items; item += threads) {
          const Pack<W> pa = load_pack<W>(ra, item);
          Pack<W> pb{};
          if constexpr (Op::kTwoInputs) pb = load_pack<W>(rb, item);
          Pack<W> o;
#pragma unroll
          for (int c = 0; c < W; ++c) o.v[c] = op.map(pa.v[c], pb.v[c], item * W + c, stat, ctx);
          store_pack<W>(ro, item, o);
        }
      }
    }
    if (t == 0) op.finish(r, ra, stat, ctx);
  }
}

// The smallest i with targets[i] outside [0, classes), as an atomicMin over one word that the
// host set to ULLONG_MAX (min is order-independent, so the answer is deterministic). Each
// thread walks its indices in increasing order and stops at its first bad one.
__global__ void __launch_bounds__(kWarpRowsThreads)
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

// ---- host helpers ----

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

unsigned row_grid(int64_t blocks) {
  return static_cast<unsigned>(blocks < std::numeric_limits<int32_t>::max() ? blocks
                                                                             : std::numeric_limits<int32_t>::max());
}

template <int kPerLane, class Op>
void launch_warp_rows(const CudaBackend& be, const Op& op, int64_t rows, int64_t cols) {
  const unsigned blocks = row_grid(ceil_div(rows, kWarpRows));
  rows_warp_kernel<kPerLane, Op><<<blocks, kWarpRowsThreads, 0, be.stream()>>>(op, rows, cols);
  MINIDL_LAUNCH_CHECK();
}

template <int W, int kCache, class Op>
void launch_block_rows(const CudaBackend& be, const Op& op, int64_t rows, int64_t cols, int threads) {
  rows_block_kernel<W, kCache, Op><<<row_grid(rows), threads, 0, be.stream()>>>(op, rows, cols);
  MINIDL_LAUNCH_CHECK();
}

// Picks the row strategy for op over [rows, cols] (see the file comment) and launches it.
template <class Op>
void launch_rows(const CudaBackend& be, const Op& op, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  if (cols <= kWarpMaxCols) {
    const int64_t per_lane = ceil_div(cols, kWarpSize);
    if (per_lane <= 1) launch_warp_rows<1>(be, op, rows, cols);
    else if (per_lane <= 2) launch_warp_rows<2>(be, op, rows, cols);
    else if (per_lane <= 4) launch_warp_rows<4>(be, op, rows, cols);
    else if (per_lane <= 8) launch_warp_rows<8>(be, op, rows, cols);
    else if (per_lane <= 16) launch_warp_rows<16>(be, op, rows, cols);
    else launch_warp_rows<32>(be, op, rows, cols);
    return;
  }
  const int threads = cols <= 4096 ? 256 : cols <= 16384 ? 512 : kMaxRowThreads;
  const bool vec = cols % 4 == 0 && aligned16(op.a) && (!Op::kTwoInputs || aligned16(op.b)) &&
                   (!Op::kWrites || aligned16(op.out));
  if (!vec) {
    launch_block_rows<1, 0>(be, op, rows, cols, threads);
    return;
  }
  // Register caching pays when the row is both reduced and written (read once instead of
  // twice); at 1024 threads a thread has 64 registers, so two inputs cache at most 4 float4s.
  constexpr bool kCacheable = Op::kWrites && Op::kReduce != RowReduce::None;
  constexpr int kMaxCache = Op::kTwoInputs ? 4 : 8;
  const int64_t per_thread = ceil_div(cols / 4, threads);
  if constexpr (kCacheable) {
    if (per_thread <= 2) {
      launch_block_rows<4, 2>(be, op, rows, cols, threads);
      return;
    }
    if (per_thread <= 4) {
      launch_block_rows<4, 4>(be, op, rows, cols, threads);
      return;
    }
    if constexpr (kMaxCache >= 8) {
      if (per_thread <= 8) {
        launch_block_rows<4, 8>(be, op, rows, cols, threads);
        return;
      }
    }
  }
  (void)per_thread;
  launch_block_rows<4, 0>(be, op, rows, cols, threads);
}

void require_rows(const Tensor& t, const char* op, const char* what) {
  require_float32(t, op, what);
  MINIDL_CHECK(t.dim() == 2 && t.is_contiguous(), op, ": ", what,
               " must be a contiguous [rows, cols] matrix, got shape ", t.shape());
}

void require_same_shape(const Tensor& t, const Tensor& like, const char* op, const char* what) {
  MINIDL_CHECK(t.shape() == like.shape(), op, ": ", what, " has shape ", t.shape(), ", expected ", like.shape());
}

void require_targets(const Tensor& targets, int64_t rows, const char* op) {
  MINIDL_CHECK(targets.dtype() == DType::Int64 && targets.numel() == rows && targets.is_contiguous(), op,
               ": targets must be contiguous int64 [", rows, "], got ", targets.dtype(), " with shape ",
               targets.shape());
}

void require_per_row(const Tensor& t, int64_t rows, const char* op, const char* what) {
  require_float32(t, op, what);
  MINIDL_CHECK(t.numel() == rows && t.is_contiguous(), op, ": ", what, " must be contiguous with ", rows,
               " elements, got shape ", t.shape());
}

}  // namespace

// ---- launchers ----

void CudaBackend::log_softmax_forward(const Tensor& x, Tensor& y) {
  DeviceGuard guard(device_index());
  require_rows(x, "log_softmax", "x");
  require_rows(y, "log_softmax", "y");
  require_same_shape(y, x, "log_softmax", "y");
  LogSoftmaxForward op;
  op.a = x.data<float>();
  op.out = y.data<float>();
  launch_rows(*this, op, x.shape()[0], x.shape()[1]);
}

void CudaBackend::log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  DeviceGuard guard(device_index());
  require_rows(y, "log_softmax_backward", "y");
  require_rows(dy, "log_softmax_backward", "dy");
  require_rows(dx, "log_softmax_backward", "dx");
  require_same_shape(dy, y, "log_softmax_backward", "dy");
  require_same_shape(dx, y, "log_softmax_backward", "dx");
  LogSoftmaxBackward op;
  op.a = dy.data<float>();
  op.b = y.data<float>();
  op.out = dx.data<float>();
  launch_rows(*this, op, y.shape()[0], y.shape()[1]);
}

void CudaBackend::softmax_forward(const Tensor& x, Tensor& y) {
  DeviceGuard guard(device_index());
  require_rows(x, "softmax", "x");
  require_rows(y, "softmax", "y");
  require_same_shape(y, x, "softmax", "y");
  SoftmaxForward op;
  op.a = x.data<float>();
  op.out = y.data<float>();
  launch_rows(*this, op, x.shape()[0], x.shape()[1]);
}

void CudaBackend::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  DeviceGuard guard(device_index());
  require_rows(y, "softmax_backward", "y");
  require_rows(dy, "softmax_backward", "dy");
  require_rows(dx, "softmax_backward", "dx");
  require_same_shape(dy, y, "softmax_backward", "dy");
  require_same_shape(dx, y, "softmax_backward", "dx");
  SoftmaxBackward op;
  op.a = dy.data<float>();
  op.b = y.data<float>();
  op.out = dx.data<float>();
  launch_rows(*this, op, y.shape()[0], y.shape()[1]);
}

std::optional<std::pair<int64_t, int64_t>> CudaBackend::find_invalid_target(const Tensor& targets,
                                                                            int64_t num_classes) {
  DeviceGuard guard(device_index());
  constexpr const char* op = "softmax_cross_entropy";
  MINIDL_CHECK(targets.dtype() == DType::Int64 && targets.is_contiguous(), op,
               ": targets must be contiguous int64, got ", targets.dtype(), " with shape ", targets.shape());
  const int64_t n = targets.numel();
  if (n == 0) return std::nullopt;
  // One word on the device: ULLONG_MAX (all bits set) until a bad row lowers it.
  Tensor first = empty(Shape{1}, TensorOptions(DType::Int64, device()));
  auto* first_ptr = static_cast<unsigned long long*>(first.raw_data());
  MINIDL_CUDA_CHECK(cudaMemsetAsync(first_ptr, 0xFF, sizeof(unsigned long long), stream()));
  const unsigned blocks = grid_for(n, kWarpRowsThreads, multiprocessor_count(), 4);
  first_invalid_target_kernel<<<blocks, kWarpRowsThreads, 0, stream()>>>(targets.data<int64_t>(), n, num_classes,
                                                                          first_ptr);
  MINIDL_LAUNCH_CHECK();
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

void CudaBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss,
                                                Tensor& lse) {
  DeviceGuard guard(device_index());
  constexpr const char* name = "softmax_cross_entropy";
  require_rows(logits, name, "logits");
  const int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  require_targets(targets, rows, name);
  require_per_row(loss, rows, name, "loss");
  require_per_row(lse, rows, name, "lse");
  CrossEntropyForward op;
  op.a = logits.data<float>();
  op.targets = targets.data<int64_t>();
  op.loss = loss.data<float>();
  op.lse_out = lse.data<float>();
  op.cols = cols;
  launch_rows(*this, op, rows, cols);
}

void CudaBackend::softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                                 const Tensor& scale, Tensor& dlogits) {
  DeviceGuard guard(device_index());
  constexpr const char* name = "softmax_cross_entropy_backward";
  require_rows(logits, name, "logits");
  require_rows(dlogits, name, "dlogits");
  require_same_shape(dlogits, logits, name, "dlogits");
  const int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  require_targets(targets, rows, name);
  require_per_row(lse, rows, name, "lse");
  require_float32(scale, name, "scale");
  // As on the CPU: one scale per row, or a single one for every row.
  MINIDL_CHECK(scale.is_contiguous() && (scale.numel() == 1 || scale.numel() == rows), name,
               ": scale must hold 1 or ", rows, " elements, got shape ", scale.shape());
  CrossEntropyBackward op;
  op.a = logits.data<float>();
  op.out = dlogits.data<float>();
  op.targets = targets.data<int64_t>();
  op.lse = lse.data<float>();
  op.scale = scale.data<float>();
  op.scale_stride = scale.numel() > 1 ? 1 : 0;
  launch_rows(*this, op, rows, cols);
}

// Note [fused cross-entropy] (core/ops/softmax.cpp). This method is one kernel launch: loss
// and dlogits for every row ([4096, 10]: one warp per row, 512 blocks). The op around it,
// ops::softmax_cross_entropy with the Mean reduction, adds on this stream: find_invalid_target
// before (a memset, one small kernel, an 8-byte copy to the host and a stream sync), then
// sum_dim over the N losses (one kernel while N < 32768), the fill that makes the 1/N scalar
// (one kernel) and the in-place multiply by it (one kernel): 5 kernels per loss in all. The
// backward of a loss seeded with the implicit 1 launches nothing (dlogits are returned as is).
void CudaBackend::softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, double scale, Tensor& loss,
                                              Tensor& dlogits) {
  DeviceGuard guard(device_index());
  constexpr const char* name = "softmax_cross_entropy";
  require_rows(logits, name, "logits");
  require_rows(dlogits, name, "dlogits");
  require_same_shape(dlogits, logits, name, "dlogits");
  const int64_t rows = logits.shape()[0], cols = logits.shape()[1];
  require_targets(targets, rows, name);
  require_per_row(loss, rows, name, "loss");
  CrossEntropyFused op;
  op.a = logits.data<float>();
  op.out = dlogits.data<float>();
  op.targets = targets.data<int64_t>();
  op.loss = loss.data<float>();
  op.scale = static_cast<float>(scale);
  op.cols = cols;
  launch_rows(*this, op, rows, cols);
}

}  // namespace minidl::cuda
