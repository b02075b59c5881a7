// The row engine of the CUDA softmax family: one kernel template per row strategy, run with a
// small "row op" struct that says what is reduced over each row of [rows, cols] float32 and
// what is written per element. softmax.cu (log_softmax, softmax, their backward) and
// cross_entropy.cu (softmax-cross-entropy forward, backward, fused) are its users; a new row
// op is a struct that satisfies the RowOp concept below and a call of launch_rows.
//
// Strategy:
//   cols <= 1024: a warp per row (8 rows per 256-thread block). Lane l keeps row elements
//     l, l + 32, ... in registers (kPerLane of them, a power of 2 >= cols / 32), reduces them,
//     combines the lanes with butterfly shuffles (every lane gets the result), and writes the
//     outputs from registers: the row is read from memory once.
//   cols > 1024: a block per row (256, 512 or 1024 threads as cols grows), float4 loads when
//     every row is 16-byte aligned (cols % 4 == 0 and aligned pointers), scalar otherwise.
//     When the row fits in registers (<= 8 float4 per thread, cols <= 32768) each thread caches
//     its float4s and the row is read once; the softmax-type outputs then reuse exp(x - m_t)
//     from the reduction (m_t the thread's own max), rescaled by exp(m_t - m) / s: one exp per
//     element instead of two. Longer rows stream twice (reduce, then write), the second read
//     mostly from L2.
//   Log-sum-exp is the online form (Milakov & Gimelshein): each thread keeps (m, s) with
//     s = Σ exp(x - m) and rescales s when m grows; pairs (m1, s1), (m2, s2) merge into
//     (M, s1·exp(m1 - M) + s2·exp(m2 - M)), M = max — symmetric, so the butterfly lanes agree,
//     and the merge order is fixed by the launch shape: results repeat bit for bit. The ops get
//     m, log s and 1/s apart, never lse = m + log s rounded to float at the logits' scale
//     (Note [softmax at the logits' scale] in core/ops/softmax.cpp).
//   Infinities and NaN follow the CPU: a NaN anywhere makes the row NaN; -inf entries add 0.
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

// What a row op reduces over each row before it writes: the log-sum-exp of a, the sum of
// summand(a, b), or nothing (the statistic comes from row(r).stat).
enum class RowReduce { LogSumExp, Sum, None };

// A row's statistic, as its reduction leaves it. LogSumExp: m = max_j a_j and, with
// s = Σ_j exp(a_j - m), log_s = log s and inv_s = 1 / s (lse = m + log_s is never formed: Note
// [softmax at the logits' scale], core/ops/softmax.cpp). Sum: sum. The fields a reduction does
// not set keep these defaults.
struct RowStat {
  float m = 0.0f;
  float log_s = 0.0f;
  float inv_s = 1.0f;
  float sum = 0.0f;
};

// Per-row values an op needs besides the row itself (cross-entropy: target, scale, the weights of
// its target distribution, and for the backward the statistic its forward saved).
struct RowCtx {
  int64_t target = -1;
  float scale = 1.0f;
  RowStat stat;  // the row's statistic when kReduce == None
  // Cross-entropy's target distribution (1 - ε)·onehot + ε/C as what it subtracts from p·scale:
  // target_w = (1 - ε)·scale at the target, class_w = ε/C·scale everywhere; skip: an ignored row.
  float target_w = 1.0f;
  float class_w = 0.0f;
  bool skip = false;
};

// The row pointers every op has: input a (and b when it reads two), output out; row r of each
// starts at r * cols. Ops derive from it and add what they need.
struct RowIO {
  const float* a = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
};

// The row-op protocol. Every op states four flags:
//   kReduce      what the kernel reduces over the row (RowReduce above);
//   kTwoInputs   whether b is read (a second input of the row's shape);
//   kWrites      whether out is written, one value per element;
//   kMapFromExp  whether out depends on a only through p = exp(a - m) / s, so the block kernel
//                may feed map_exp(p, j, ctx) from the exps it computed for the reduction (so only
//                with kReduce == LogSumExp; launch_rows asserts it);
// and has, on the device:
//   row(r) -> RowCtx                  the per-row values, read once per row;
//   finish(r, row_a, stat, ctx)       run by one thread per row after the reduction (may do nothing);
// and, as the flags ask:
//   summand(a, b) -> float            kReduce == Sum: the terms of the sum;
//   map(a, b, j, stat, ctx) -> float  kWrites: out[j] from the inputs and the row's RowStat
//                                     (m, log_s, inv_s; the sum; or ctx.stat when kReduce == None);
//   map_exp(p, j, ctx) -> float       kMapFromExp: out[j] from p = exp(a[j] - m) / s.
// The kernels call only what the flags ask for.
template <class Op>
concept RowOp =
    std::derived_from<Op, RowIO> && std::copy_constructible<Op> &&
    requires(const Op op, int64_t r, const float* row, const RowStat& stat, const RowCtx& ctx) {
      { Op::kReduce } -> std::convertible_to<RowReduce>;
      { Op::kTwoInputs } -> std::convertible_to<bool>;
      { Op::kWrites } -> std::convertible_to<bool>;
      { Op::kMapFromExp } -> std::convertible_to<bool>;
      { op.row(r) } -> std::same_as<RowCtx>;
      op.finish(r, row, stat, ctx);
    } &&
    (Op::kReduce != RowReduce::Sum || requires(const Op op, float v) {
      { op.summand(v, v) } -> std::same_as<float>;
    }) &&
    (!Op::kWrites || requires(const Op op, float v, int64_t j, const RowStat& stat, const RowCtx& ctx) {
      { op.map(v, v, j, stat, ctx) } -> std::same_as<float>;
    }) &&
    (!Op::kMapFromExp || requires(const Op op, float v, int64_t j, const RowCtx& ctx) {
      { op.map_exp(v, j, ctx) } -> std::same_as<float>;
    });

namespace row_engine {

constexpr int kWarpRowsThreads = 256;  // warp-per-row kernels: 8 rows per block
constexpr int kWarpRows = kWarpRowsThreads / kWarpSize;
constexpr int kMaxRowThreads = 1024;   // block-per-row kernels: at most this many threads
constexpr int64_t kWarpMaxCols = 1024;  // rows up to this length take a warp each

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

// The statistic of a reduced (m, s). Every thread of the row computes it (the same values).
__device__ inline RowStat lse_stat(float m, float s) {
  RowStat st;
  st.m = m;
  st.log_s = logf(s);
  st.inv_s = 1.0f / s;
  return st;
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
template <int kPerLane, RowOp Op>
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
    RowStat stat = ctx.stat;
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
      stat = lse_stat(m, s);
    } else if constexpr (Op::kReduce == RowReduce::Sum) {
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k)
        if (lane + k * kWarpSize < cols) acc += op.summand(ca[k], cb[k]);
      stat.sum = warp_sum(acc);
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
template <int W, int kCache, RowOp Op>
__global__ void __launch_bounds__(kMaxRowThreads) rows_block_kernel(Op op, int64_t rows, int64_t cols) {
  __shared__ float scratch_m[kWarpSize], scratch_s[kWarpSize];
  const int64_t items = cols / W;
  const int t = threadIdx.x, threads = blockDim.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* ra = op.a + r * cols;                            // [cols]
    const float* rb = Op::kTwoInputs ? op.b + r * cols : nullptr;  // [cols]
    float* ro = Op::kWrites ? op.out + r * cols : nullptr;         // [cols]
    const RowCtx ctx = op.row(r);
    RowStat stat = ctx.stat;
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
        stat = lse_stat(m, s);
        if constexpr (Op::kMapFromExp) {
          // p = exp(x - m_thread) · (exp(m_thread - m) / s), the factor once per thread. A thread
          // whose elements are all -inf kept e = 1 for them; its factor exp(-inf - m) = 0 makes
          // p = 0 as it should, and for an all -inf row (m = -inf) it is NaN, as on the CPU
          // (exp(-inf - -inf)).
          // Note [+inf in the cached row]: a +inf logit makes m_thread = m = +inf in its thread,
          // and the sum took e = 1 for each +inf there (the v == m branch: s counts the +infs, as
          // on the CPU), where the CPU's p = exp(x - m) / s is exp(+inf - +inf) = NaN. The thread's
          // other elements have e = exp(x - inf) = 0 (or NaN for a NaN: the whole row is NaN then).
          // So such a thread, and only it, puts NaN in place of its e == 1 (exactly the +infs) and
          // takes factor 1/s: exp(m_thread - m) would be exp(NaN) and turn the zeros to NaN too.
          // Threads without a +inf get exp(finite or -inf - +inf) = 0: p = 0, as on the CPU. The
          // common path pays one compare per thread and row; the arithmetic per element is unchanged.
          float factor;
          if (m_thread == INFINITY) {
            factor = stat.inv_s;
#pragma unroll
            for (int k = 0; k < kCache; ++k)
              if (t + k * threads < cached_items)
#pragma unroll
                for (int c = 0; c < W; ++c)
                  if (ca[k].v[c] == 1.0f) ca[k].v[c] = NAN;
          } else {
            factor = expf(m_thread - m) * stat.inv_s;
          }
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
        stat.sum = block_sum(acc, scratch_s);
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
        stat = lse_stat(m, s);
      } else if constexpr (Op::kReduce == RowReduce::Sum) {
        float acc = 0.0f;
        for (int64_t item = t; item < items; item += threads) {
          const Pack<W> pa = load_pack<W>(ra, item);
          Pack<W> pb{};
          if constexpr (Op::kTwoInputs) pb = load_pack<W>(rb, item);
#pragma unroll
          for (int c = 0; c < W; ++c) acc += op.summand(pa.v[c], pb.v[c]);
        }
        stat.sum = block_sum(acc, scratch_s);
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

// ---- host helpers ----

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

inline unsigned row_grid(int64_t blocks) {
  return static_cast<unsigned>(blocks < std::numeric_limits<int32_t>::max() ? blocks
                                                                             : std::numeric_limits<int32_t>::max());
}

template <int kPerLane, RowOp Op>
void launch_warp_rows(const CudaBackend& be, const Op& op, int64_t rows, int64_t cols) {
  const unsigned blocks = row_grid(ceil_div(rows, kWarpRows));
  MINIDL_LAUNCH(rows_warp_kernel<kPerLane, Op>, blocks, kWarpRowsThreads, 0, be.stream(), op, rows, cols);
}

template <int W, int kCache, RowOp Op>
void launch_block_rows(const CudaBackend& be, const Op& op, int64_t rows, int64_t cols, int threads) {
  MINIDL_LAUNCH(rows_block_kernel<W, kCache, Op>, row_grid(rows), threads, 0, be.stream(), op, rows, cols);
}

// Picks the row strategy for op over [rows, cols] (see the file comment) and launches it.
template <RowOp Op>
void launch_rows(const CudaBackend& be, const Op& op, int64_t rows, int64_t cols) {
  static_assert(!Op::kMapFromExp || Op::kReduce == RowReduce::LogSumExp,
                "kMapFromExp reuses the exps of a log-sum-exp reduction; other reductions have none");
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

}  // namespace row_engine

using row_engine::launch_rows;

}  // namespace minidl::cuda
