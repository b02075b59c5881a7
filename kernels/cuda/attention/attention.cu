// CUDA scaled dot-product attention (float32), FlashAttention-2's algorithm (core/ops/attention.cpp
// has the math). Per (b, h): s_ij = q_i·k_j·scale (−inf where the causal mask hides key j > i),
// P = softmax_rows(s), Z the dropout mask (0 or 1/(1 − p)), Pd = P∘Z:
//   forward   out = Pd·v, lse_i = log Σ_j exp(s_ij)
//   backward  D_i = dout_i·out_i;  dS = P∘((dout·vᵀ)∘Z − D)
//             dv = Pdᵀ·dout,  dk = dSᵀ·q·scale,  dq = dS·k·scale,  P = exp(s − lse) recomputed
// Shapes: q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev] with any strides on (b, h, row) and
// stride 1 along E/Ev; out, dout, dq, dk, dv contiguous; lse and D [B·H·L]. E, Ev <= 128.
// 16-bit q, k, v: the forward runs on tensor cores (flash_mma.cu) where its head sizes allow; the
// backward, and the forward elsewhere, run these float32 kernels on float32 copies, the lse
// being float32 already.
// Strategy (kThreads = 128 threads = 4 warps per block; key tiles of kBlockK = 32 keys, staged
// in shared memory [32][129] — the pad makes both "lane = key" and "lane = feature" reads
// conflict-free):
//   forward       a block per (b·h, tile of kBlockQ = 16 query rows), 4 rows per warp. For each
//                 key tile, lane j scores key j against the warp's row, the warp's max and sum
//                 (shuffles) update the row's running max m and sum l, and the output row — held
//                 across the lanes, feature e = lane + 32t — is rescaled and gets Σ_j Pd_ij·v_j
//                 (Pd_ij broadcast by shuffle). Causal tiles wholly after the block's last row are
//                 never loaded.
//   D             a warp per row: dout_i·out_i.
//   dk, dv        a block per (b·h, key tile); thread (key j = tid/4, c = tid%4) accumulates
//                 dk_j and dv_j at features c, c + 4, ... in registers. Rounds of 4 query rows
//                 (one per warp, starting at the tile's first key under the causal mask): each
//                 warp scores its row against the 32 keys, writes Pd and dS to shared memory, and
//                 every thread then adds the 4 rows in order.
//   dq            a block per (b·h, query tile), as forward: lane j gives dS_ij, and the warp's
//                 row of dq (features across lanes) gets Σ_j dS_ij·k_j.
// No atomics: every output element is summed by one thread in an order fixed by the shape, so
// results repeat bit for bit. The dropout mask of (b·h, i, j) is Philox counter
// offset + (bh·L + i)·S + j, as on the CPU, so both draw the same mask.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/attention/flash_mma.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kRowsPerWarp = 4;
constexpr int kBlockQ = kWarps * kRowsPerWarp;  // 16 query rows per block
constexpr int kBlockK = kWarpSize;              // 32 keys per tile: lane j takes key j
constexpr int kMaxHead = 128;                   // E and Ev
constexpr int kPerLane = kMaxHead / kWarpSize;  // features per lane of a row held across a warp
constexpr int kPad = kMaxHead + 1;              // row pitch of the shared tiles
constexpr int kKeyThreads = kThreads / kBlockK; // threads per key in the dk/dv kernel (4)
constexpr int kPerKeyThread = kMaxHead / kKeyThreads;
constexpr int kRowThreads = 256;                // D kernel: a warp per row, 8 rows per block

// The operands and sizes every kernel reads.
struct AttentionArgs {
  const float *q, *k, *v;
  int64_t q_b, q_h, q_row, k_b, k_h, k_row, v_b, v_h, v_row;  // strides (elements)
  int64_t H, L, S, E, Ev;
  float scale;
  bool causal;
  bool dropout;
  float keep, inv_keep;  // 1 − p and 1/(1 − p)
  uint64_t seed, offset;
};

// ---- kernels ----

__device__ inline float dropout_factor(const AttentionArgs& a, int64_t bh, int64_t i, int64_t j) {
  if (!a.dropout) return 1.0f;
  const uint64_t counter = static_cast<uint64_t>((bh * a.L + i) * a.S + j);
  return philox::uniform_float(philox::block_for(a.seed, a.offset, counter)) < a.keep ? a.inv_keep : 0.0f;
}

__device__ inline bool visible(const AttentionArgs& a, int64_t i, int64_t j) {
  return i < a.L && j < a.S && (!a.causal || j <= i);
}

// tile[jj][e] = src[(j0 + jj)·row + e] for the kBlockK keys from j0 (0 past S), e < width.
__device__ inline void load_tile(const float* __restrict__ src, int64_t row, int64_t j0, int64_t S, int64_t width,
                                 float (*tile)[kPad]) {
  for (int64_t idx = threadIdx.x; idx < kBlockK * width; idx += kThreads) {
    const int64_t jj = idx / width, e = idx % width, j = j0 + jj;
    tile[jj][e] = j < S ? src[j * row + e] : 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads) attention_forward_kernel(AttentionArgs a, float* __restrict__ out,
                                                                     float* __restrict__ lse) {
  __shared__ float k_tile[kBlockK][kPad];                   // tile [32, E] of keys
  __shared__ float v_tile[kBlockK][kPad];                   // tile [32, Ev] of values
  __shared__ float q_rows[kWarps][kRowsPerWarp][kMaxHead];  // each warp's query rows, times scale
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kBlockQ;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const float* q = a.q + b * a.q_b + h * a.q_h;
  const float* k = a.k + b * a.k_b + h * a.k_h;
  const float* v = a.v + b * a.v_b + h * a.v_h;
  const int64_t row0 = i0 + warp * kRowsPerWarp;  // this warp's first query row
  for (int r = 0; r < kRowsPerWarp; ++r)
    for (int64_t e = lane; e < a.E; e += kWarpSize)
      q_rows[warp][r][e] = row0 + r < a.L ? q[(row0 + r) * a.q_row + e] * a.scale : 0.0f;
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[r][t] = 0.0f;
  }
  const int64_t s_end = a.causal ? (a.S < i0 + kBlockQ ? a.S : i0 + kBlockQ) : a.S;
  for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous tile (and q_rows is written)
    load_tile(k, a.k_row, j0, a.S, a.E, k_tile);
    load_tile(v, a.v_row, j0, a.S, a.Ev, v_tile);
    __syncthreads();
    const int64_t j = j0 + lane;
    const int nk = static_cast<int>(a.S - j0 < kBlockK ? a.S - j0 : kBlockK);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = row0 + r;
      const bool seen = visible(a, i, j);
      float s = -INFINITY;
      if (seen) {
        float dot = 0.0f;
        for (int64_t e = 0; e < a.E; ++e) dot += q_rows[warp][r][e] * k_tile[lane][e];
        s = dot;
      }
      const float m_new = fmaxf(m[r], warp_max(s));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet
      const float p = seen ? __expf(s - m_use) : 0.0f;
      const float alpha = __expf(m[r] - m_use);  // 0 while m = −inf
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = m_new;
      const float pd = seen ? p * dropout_factor(a, bh, i, j) : 0.0f;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[r][t] *= alpha;
      for (int jj = 0; jj < nk; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, pd, jj);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int e = lane + t * kWarpSize;
          if (e < a.Ev) acc[r][t] += pj * v_tile[jj][e];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    if (i >= a.L) continue;
    const float inv = 1.0f / l[r];
    float* o = out + (bh * a.L + i) * a.Ev;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = lane + t * kWarpSize;
      if (e < a.Ev) o[e] = acc[r][t] * inv;
    }
    if (lane == 0) lse[bh * a.L + i] = m[r] + logf(l[r]);
  }
}

// D[row] = dout[row]·out[row] over [rows, Ev], a warp per row.
__global__ void __launch_bounds__(kRowThreads) attention_row_dot_kernel(const float* __restrict__ dout,
                                                                        const float* __restrict__ out, int64_t rows,
                                                                        int64_t cols, float* __restrict__ D) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kRowThreads / kWarpSize);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (kRowThreads / kWarpSize) + threadIdx.x / kWarpSize; r < rows;
       r += warps) {
    float s = 0.0f;
    for (int64_t e = lane; e < cols; e += kWarpSize) s += dout[r * cols + e] * out[r * cols + e];
    s = warp_sum(s);
    if (lane == 0) D[r] = s;
  }
}

__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(AttentionArgs a, const float* __restrict__ dout, const float* __restrict__ lse,
                                   const float* __restrict__ D, float* __restrict__ dk, float* __restrict__ dv) {
  __shared__ float k_tile[kBlockK][kPad];       // tile [32, E] of keys
  __shared__ float v_tile[kBlockK][kPad];       // tile [32, Ev] of values
  __shared__ float q_rows[kWarps][kMaxHead];    // one query row per warp
  __shared__ float g_rows[kWarps][kMaxHead];    // and its dout row
  __shared__ float pd_rows[kWarps][kBlockK];    // Pd of those rows against the tile's keys
  __shared__ float ds_rows[kWarps][kBlockK];    // dS likewise
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kBlockK;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int key = threadIdx.x / kKeyThreads, c = threadIdx.x % kKeyThreads;  // accumulator owner
  const float* q = a.q + b * a.q_b + h * a.q_h;
  const float* g = dout + bh * a.L * a.Ev;
  load_tile(a.k + b * a.k_b + h * a.k_h, a.k_row, j0, a.S, a.E, k_tile);
  load_tile(a.v + b * a.v_b + h * a.v_h, a.v_row, j0, a.S, a.Ev, v_tile);
  float acc_k[kPerKeyThread], acc_v[kPerKeyThread];  // features c + 4t of dk_j, dv_j
#pragma unroll
  for (int t = 0; t < kPerKeyThread; ++t) acc_k[t] = acc_v[t] = 0.0f;
  const int64_t j = j0 + lane;
  for (int64_t base = a.causal ? j0 : 0; base < a.L; base += kWarps) {
    const int64_t i = base + warp;
    __syncthreads();  // the tiles are loaded, and the previous round's rows are consumed
    for (int64_t e = lane; e < a.E; e += kWarpSize) q_rows[warp][e] = i < a.L ? q[i * a.q_row + e] : 0.0f;
    for (int64_t e = lane; e < a.Ev; e += kWarpSize) g_rows[warp][e] = i < a.L ? g[i * a.Ev + e] : 0.0f;
    __syncwarp();
    float pd = 0.0f, ds = 0.0f;
    if (visible(a, i, j)) {
      float s = 0.0f, dpd = 0.0f;
      for (int64_t e = 0; e < a.E; ++e) s += q_rows[warp][e] * k_tile[lane][e];
      for (int64_t e = 0; e < a.Ev; ++e) dpd += g_rows[warp][e] * v_tile[lane][e];
      const float p = __expf(s * a.scale - lse[bh * a.L + i]);
      const float z = dropout_factor(a, bh, i, j);
      pd = p * z;
      ds = p * (dpd * z - D[bh * a.L + i]);
    }
    pd_rows[warp][lane] = pd;
    ds_rows[warp][lane] = ds;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {  // the round's rows in order
      const float pw = pd_rows[w][key], sw = ds_rows[w][key];
#pragma unroll
      for (int t = 0; t < kPerKeyThread; ++t) {
        const int e = c + t * kKeyThreads;
        if (e < a.Ev) acc_v[t] += pw * g_rows[w][e];
        if (e < a.E) acc_k[t] += sw * q_rows[w][e];
      }
    }
  }
  const int64_t jk = j0 + key;
  if (jk >= a.S) return;
#pragma unroll
  for (int t = 0; t < kPerKeyThread; ++t) {
    const int e = c + t * kKeyThreads;
    if (e < a.E) dk[(bh * a.S + jk) * a.E + e] = acc_k[t] * a.scale;
    if (e < a.Ev) dv[(bh * a.S + jk) * a.Ev + e] = acc_v[t];
  }
}

__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(AttentionArgs a, const float* __restrict__ dout, const float* __restrict__ lse,
                                 const float* __restrict__ D, float* __restrict__ dq) {
  __shared__ float k_tile[kBlockK][kPad];     // tile [32, E] of keys
  __shared__ float v_tile[kBlockK][kPad];     // tile [32, Ev] of values
  __shared__ float q_rows[kWarps][kMaxHead];  // the warp's current query row
  __shared__ float g_rows[kWarps][kMaxHead];  // and its dout row
  const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kBlockQ;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const float* q = a.q + b * a.q_b + h * a.q_h;
  const float* g = dout + bh * a.L * a.Ev;
  const int64_t row0 = i0 + warp * kRowsPerWarp;
  float acc[kRowsPerWarp][kPerLane];  // dq rows, feature lane + 32t
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[r][t] = 0.0f;
  const int64_t s_end = a.causal ? (a.S < i0 + kBlockQ ? a.S : i0 + kBlockQ) : a.S;
  for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile(a.k + b * a.k_b + h * a.k_h, a.k_row, j0, a.S, a.E, k_tile);
    load_tile(a.v + b * a.v_b + h * a.v_h, a.v_row, j0, a.S, a.Ev, v_tile);
    __syncthreads();
    const int64_t j = j0 + lane;
    const int nk = static_cast<int>(a.S - j0 < kBlockK ? a.S - j0 : kBlockK);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = row0 + r;
      __syncwarp();  // the warp is done reading the previous row
      for (int64_t e = lane; e < a.E; e += kWarpSize) q_rows[warp][e] = i < a.L ? q[i * a.q_row + e] : 0.0f;
      for (int64_t e = lane; e < a.Ev; e += kWarpSize) g_rows[warp][e] = i < a.L ? g[i * a.Ev + e] : 0.0f;
      __syncwarp();
      float ds = 0.0f;
      if (visible(a, i, j)) {
        float s = 0.0f, dpd = 0.0f;
        for (int64_t e = 0; e < a.E; ++e) s += q_rows[warp][e] * k_tile[lane][e];
        for (int64_t e = 0; e < a.Ev; ++e) dpd += g_rows[warp][e] * v_tile[lane][e];
        const float p = __expf(s * a.scale - lse[bh * a.L + i]);
        ds = p * (dpd * dropout_factor(a, bh, i, j) - D[bh * a.L + i]);
      }
      for (int jj = 0; jj < nk; ++jj) {
        const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int e = lane + t * kWarpSize;
          if (e < a.E) acc[r][t] += dsj * k_tile[jj][e];
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = row0 + r;
    if (i >= a.L) continue;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int e = lane + t * kWarpSize;
      if (e < a.E) dq[(bh * a.L + i) * a.E + e] = acc[r][t] * a.scale;
    }
  }
}

// ---- helpers of the launchers ----

AttentionArgs make_args(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, double dropout_p,
                        uint64_t seed, uint64_t offset) {
  AttentionArgs a{};
  a.q = q.data<float>();
  a.k = k.data<float>();
  a.v = v.data<float>();
  a.q_b = q.strides()[0], a.q_h = q.strides()[1], a.q_row = q.strides()[2];
  a.k_b = k.strides()[0], a.k_h = k.strides()[1], a.k_row = k.strides()[2];
  a.v_b = v.strides()[0], a.v_h = v.strides()[1], a.v_row = v.strides()[2];
  a.H = q.shape()[1];
  a.L = q.shape()[2];
  a.S = k.shape()[2];
  a.E = q.shape()[3];
  a.Ev = v.shape()[3];
  a.scale = static_cast<float>(scale);
  a.causal = causal;
  a.dropout = dropout_p > 0;
  a.keep = static_cast<float>(1.0 - dropout_p);
  a.inv_keep = static_cast<float>(1.0 / (1.0 - dropout_p));
  a.seed = seed;
  a.offset = offset;
  return a;
}

// The grid of a kernel with a block per (b·h, tile of `tile` rows out of n).
dim3 head_tile_grid(const char* what, int64_t bh, int64_t n, int64_t tile) {
  const int64_t tiles = ceil_div(n, tile);
  MINIDL_CHECK(bh <= 2147483647 && tiles <= 65535, what, ": ", bh, " heads of ", n,
               " rows exceed the CUDA grid (at most 2^31 - 1 heads and 65535 tiles of ", tile, " rows)");
  return dim3(static_cast<unsigned>(bh), static_cast<unsigned>(tiles));
}

}  // namespace

// ---- launchers ----

int64_t CudaBackend::attention_max_head_size() const { return kMaxHead; }

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                    double dropout_p, uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse) {
  if (flash_mma_applies(q, k, v, compute_capability_major())) {  // 16-bit on tensor cores (flash_mma.cu)
    MINIDL_INTERNAL_ASSERT(out.dtype() == q.dtype() && lse.dtype() == DType::Float32 && all_contiguous({&out, &lse}));
    if (dropout_p > 0) refuse_in_capture("scaled_dot_product_attention with dropout", kRandomInCapture);
    if (q.shape()[0] * q.shape()[1] == 0 || q.shape()[2] == 0) return;
    DeviceGuard guard(device_index());
    flash_mma_forward(q, k, v, causal, scale, dropout_p, seed, offset, out, lse, stream());
    return;
  }
  if (HalfStaging::needed({&q, &k, &v, &out, &lse})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    attention_forward(s.in(q), s.in(k), s.in(v), causal, scale, dropout_p, seed, offset, s.out(out), s.out(lse));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&q, &k, &v, &out, &lse}) && all_contiguous({&out, &lse}));
  MINIDL_INTERNAL_ASSERT(q.dim() == 4 && q.shape()[3] <= kMaxHead && v.shape()[3] <= kMaxHead);
  const int64_t BH = q.shape()[0] * q.shape()[1];
  if (dropout_p > 0) refuse_in_capture("scaled_dot_product_attention with dropout", kRandomInCapture);
  if (BH == 0 || q.shape()[2] == 0) return;
  DeviceGuard guard(device_index());
  const AttentionArgs a = make_args(q, k, v, causal, scale, dropout_p, seed, offset);
  MINIDL_LAUNCH(attention_forward_kernel, head_tile_grid("attention_forward", BH, a.L, kBlockQ), kThreads, 0,
                stream(), a, out.data<float>(), lse.data<float>());
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, bool causal, double scale,
                                     double dropout_p, uint64_t seed, uint64_t offset, Tensor& dq, Tensor& dk,
                                     Tensor& dv) {
  if (HalfStaging::needed({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    attention_backward(s.in(dout), s.in(q), s.in(k), s.in(v), s.in(out), s.in(lse), causal, scale, dropout_p, seed,
                       offset, s.out(dq), s.out(dk), s.out(dv));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&dout, &q, &k, &v, &out, &lse, &dq, &dk, &dv}) &&
                         all_contiguous({&dout, &out, &lse, &dq, &dk, &dv}));
  const int64_t BH = q.shape()[0] * q.shape()[1];
  if (dropout_p > 0) refuse_in_capture("scaled_dot_product_attention with dropout", kRandomInCapture);
  if (BH == 0 || q.shape()[2] == 0) return;
  DeviceGuard guard(device_index());
  const AttentionArgs a = make_args(q, k, v, causal, scale, dropout_p, seed, offset);
  const int64_t rows = BH * a.L;
  Tensor D = empty(Shape{rows}, out.options());  // [B·H·L] dout_i·out_i
  MINIDL_LAUNCH(attention_row_dot_kernel, grid_for(rows, kRowThreads / kWarpSize, multiprocessor_count()),
                kRowThreads, 0, stream(), dout.data<float>(), out.data<float>(), rows, a.Ev, D.data<float>());
  MINIDL_LAUNCH(attention_backward_dkdv_kernel, head_tile_grid("attention_backward", BH, a.S, kBlockK), kThreads, 0,
                stream(), a, dout.data<float>(), lse.data<float>(), D.data<float>(), dk.data<float>(),
                dv.data<float>());
  MINIDL_LAUNCH(attention_backward_dq_kernel, head_tile_grid("attention_backward", BH, a.L, kBlockQ), kThreads, 0,
                stream(), a, dout.data<float>(), lse.data<float>(), D.data<float>(), dq.data<float>());
}

}  // namespace minidl::cuda
