// Scaled dot-product attention forward on tensor cores, for bfloat16 and float16 q, k, v:
// FlashAttention-2's forward with its two products on mma.sync.m16n8k16 (gemm/warp_matrix.cuh).
//
// Math (per (b, h); attention.cu states the whole op and its backward):
//   s_ij = q_i·k_j·scale (−inf where key j > i under the causal mask, or j >= S),
//   out_i = Σ_j exp(s_ij − m_i)·Z_ij·v_j / l_i,  l_i = Σ_j exp(s_ij − m_i),  lse_i = m_i + log l_i
//   with m_i the row's running maximum and Z the dropout mask (0 or 1/(1 − p)), the float32
//   kernel's mask: Philox counter offset + (bh·L + i)·S + j.
// Shapes: q [B, H, L, D], k [B, H, S, D], v [B, H, S, D] with any strides on (b, h, row) and
// stride 1 along D, D in {16, 32, 64, 128}; out [B, H, L, D] contiguous, in q's dtype; lse
// [B·H·L] float32.
//
// Strategy (a block of 4 warps per (b·h, tile of 64 query rows); a warp owns 16 rows):
//   - The block's Q tile [64, D] is copied to shared memory once (cp.async when every row is
//     16-byte aligned, else element by element), and each warp keeps its rows as D/16 A fragments
//     (ldmatrix.x4) for the whole loop.
//   - For each tile of 64 keys (tiles past the block's last row skipped under the causal mask):
//     K and V tiles [64, D] into shared memory (rows past S zero-filled), then
//       S = Q·Kᵀ:  8 n-tiles of 8 keys × D/16 mma, K read as B fragments by plain ldmatrix (K is
//                  stored [key][d]: its rows run along the reduction dimension);
//       online softmax in float32 registers: a lane holds 2 rows × 16 keys; the row's maximum and
//                  sum come from its own values and two shuffles across the 4 lanes of its group;
//                  the output accumulators are rescaled by exp(m_old − m_new);
//       O += P·V:  P's accumulators are already laid out as A fragments (c0,c1 of n-tiles 2c and
//                  2c+1 are the a-registers of k-step c), rounded to the 16-bit type, as
//                  FlashAttention does; V [key][d] read by ldmatrix.trans as B fragments.
//   - Shared tiles swizzle their 16-byte chunks (chunk ^ f(row)) so that the 8 rows an ldmatrix
//     reads fall in different banks (tile_offset below).
//   - Finally out_i = O_i / l_i, rounded once to 16 bits, and lse_i in float32.
// Every output is one warp's fixed sequence of operations: the same bits run to run.
#include "kernels/cuda/attention/flash_mma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemm_plan.h"
#include "kernels/cuda/gemm/warp_matrix.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarpSize;
constexpr int kBlockRows = 64;  // query rows per block, 16 per warp
constexpr int kBlockKeys = 64;  // keys per tile

template <typename T>
struct FlashArgs {
  const T *q, *k, *v;
  T* out;
  float* lse;
  int64_t q_b, q_h, q_row, k_b, k_h, k_row, v_b, v_h, v_row;  // strides (elements)
  int64_t H, L, S;
  float scale;
  bool causal, dropout, vec;
  float keep, inv_keep;
  uint64_t seed, offset;
};

// Element (row, col) of a [64][D] tile: its 16-byte chunk col / 8 XOR-ed with a function of the
// row that spreads 8 consecutive rows over the 8 groups of 4 banks (rows of D/8 chunks).
template <int D>
__device__ __forceinline__ int tile_offset(int row, int col) {
  constexpr int kChunks = D / 8;
  const int f = kChunks >= 8 ? (row & 7) : (row / (8 / kChunks)) % kChunks;
  return row * D + (((col / 8) ^ f) * 8) + (col % 8);
}

// Rows [r0, r0 + 64) of a head's [rows, D] matrix (row stride `stride`) into a tile; rows past
// `rows` are zeros. With `vec`, 16-byte cp.async copies (committed by the caller).
template <typename T, int D>
__device__ __forceinline__ void load_rows(uint16_t* tile, const T* base, int64_t stride, int64_t r0, int64_t rows,
                                          bool vec, int tid) {
  constexpr int kChunks = D / 8;
  const uint16_t* src = reinterpret_cast<const uint16_t*>(base);
  for (int s = tid; s < kBlockRows * kChunks; s += kFlashThreads) {
    const int r = s / kChunks, c = s % kChunks;
    const bool inside = r0 + r < rows;
    const uint16_t* p = src + (r0 + r) * stride + c * 8;
    uint16_t* dst = tile + tile_offset<D>(r, c * 8);
    if (vec) {
      wm::cp_async_16(dst, inside ? p : src, inside ? 16 : 0);
    } else {
      uint16_t e[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) e[q] = inside ? p[q] : 0;
      *reinterpret_cast<uint4*>(dst) = make_uint4(wm::pack_b16(e[0], e[1]), wm::pack_b16(e[2], e[3]),
                                                  wm::pack_b16(e[4], e[5]), wm::pack_b16(e[6], e[7]));
    }
  }
}

template <typename T>
__device__ __forceinline__ uint16_t bits16(float v) {
  return bits_of(from_float<T>(v));
}

template <typename T, int D>
__global__ void __launch_bounds__(kFlashThreads) flash_mma_forward_kernel(const FlashArgs<T> a) {
  constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr int KD = D / 16;  // k-steps of Q·Kᵀ
  constexpr int ND = D / 8;   // n-tiles of P·V
  __shared__ __align__(128) uint16_t q_tile[kBlockRows * D];
  __shared__ __align__(128) uint16_t k_tile[kBlockKeys * D];
  __shared__ __align__(128) uint16_t v_tile[kBlockKeys * D];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int group = lane >> 2, tig = lane & 3;
  const int quarter = lane >> 3, j8 = lane & 7;  // ldmatrix.x4: which 8×8 matrix this lane addresses, and its row
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  const T* q = a.q + b * a.q_b + h * a.q_h;
  const T* k = a.k + b * a.k_b + h * a.k_h;
  const T* v = a.v + b * a.v_b + h * a.v_h;

  load_rows<T, D>(q_tile, q, a.q_row, q0, a.L, a.vec, tid);
  wm::cp_async_commit();
  wm::cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KD][4];  // this warp's 16 rows as A fragments, k-step by k-step
#pragma unroll
  for (int kk = 0; kk < KD; ++kk)
    wm::ldmatrix<4, false>(qf[kk], q_tile + tile_offset<D>(warp * 16 + (quarter & 1) * 8 + j8, kk * 16 + (quarter >> 1) * 8));

  // Rows of this lane: i[0] = q0 + warp·16 + group, i[1] = i[0] + 8 (accumulator halves 0-1, 2-3).
  const int64_t row[2] = {q0 + warp * 16 + group, q0 + warp * 16 + group + 8};
  float o[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[n][c] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int64_t key_end = a.causal ? (a.S < q0 + kBlockRows ? a.S : q0 + kBlockRows) : a.S;
  for (int64_t n0 = 0; n0 < key_end; n0 += kBlockKeys) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_rows<T, D>(k_tile, k, a.k_row, n0, a.S, a.vec, tid);
    load_rows<T, D>(v_tile, v, a.v_row, n0, a.S, a.vec, tid);
    wm::cp_async_commit();
    wm::cp_async_wait<0>();
    __syncthreads();

    // S = Q·Kᵀ for the warp's 16 rows × 64 keys: s[j] is the 16×8 tile of keys n0 + 8j.
    float s[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[j][c] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk)
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        uint32_t r[4];
        wm::ldmatrix<4, false>(r, k_tile + tile_offset<D>((j + (quarter >> 1)) * 8 + j8, kk * 16 + (quarter & 1) * 8));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        wm::mma_m16n8k16<BF16>(s[j], qf[kk], b0, s[j]);
        wm::mma_m16n8k16<BF16>(s[j + 1], qf[kk], b1, s[j + 1]);
      }

    // Online softmax: scale, mask, the rows' new maximum, the rescale of l and O.
    float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t key = n0 + j * 8 + 2 * tig + (c & 1), i = row[c >> 1];
        const bool seen = key < a.S && (!a.causal || key <= i);
        s[j][c] = seen ? s[j][c] * a.scale : -INFINITY;
        row_max[c >> 1] = fmaxf(row_max[c >> 1], s[j][c]);
      }
    float alpha[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
      row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
      const float m_new = fmaxf(m[r], row_max[r]);
      base[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet
      alpha[r] = __expf(m[r] - base[r]);            // 0 while m = −inf
      m[r] = m_new;
    }
    float row_sum[2] = {0.0f, 0.0f};
    uint32_t pa[4][4];  // P (dropped out, 16-bit) as A fragments, one per 16 keys
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float pd[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = s[j][c] == -INFINITY ? 0.0f : __expf(s[j][c] - base[c >> 1]);
        row_sum[c >> 1] += p;
        pd[c] = p;
        if (a.dropout && p != 0.0f) {
          const int64_t key = n0 + j * 8 + 2 * tig + (c & 1), i = row[c >> 1];
          const uint64_t counter = static_cast<uint64_t>((bh * a.L + i) * a.S + key);
          pd[c] *= philox::uniform_float(philox::block_for(a.seed, a.offset, counter)) < a.keep ? a.inv_keep : 0.0f;
        }
      }
      // n-tile j is half of k-step j / 2: rows g (c0, c1) and g + 8 (c2, c3), keys 0-7 or 8-15.
      pa[j / 2][(j % 2) * 2 + 0] = wm::pack_b16(bits16<T>(pd[0]), bits16<T>(pd[1]));
      pa[j / 2][(j % 2) * 2 + 1] = wm::pack_b16(bits16<T>(pd[2]), bits16<T>(pd[3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
      l[r] = l[r] * alpha[r] + row_sum[r];
    }
#pragma unroll
    for (int n = 0; n < ND; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[n][c] *= alpha[c >> 1];

    // O += P·V: k-step kc covers keys 16kc .. 16kc + 15 of the tile.
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
#pragma unroll
      for (int n = 0; n < ND; n += 2) {
        uint32_t r[4];
        wm::ldmatrix<4, true>(r, v_tile + tile_offset<D>(kc * 16 + (quarter & 1) * 8 + j8, (n + (quarter >> 1)) * 8));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        wm::mma_m16n8k16<BF16>(o[n], pa[kc], b0, o[n]);
        wm::mma_m16n8k16<BF16>(o[n + 1], pa[kc], b1, o[n + 1]);
      }
  }

  // out_i = O_i / l_i, rounded once; lse_i = m_i + log l_i.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row[r];
    if (i >= a.L) continue;
    const float inv = 1.0f / l[r];
    T* out = a.out + (bh * a.L + i) * D;
#pragma unroll
    for (int n = 0; n < ND; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) out[n * 8 + 2 * tig + c] = from_float<T>(o[n][r * 2 + c] * inv);
    if (tig == 0) a.lse[bh * a.L + i] = m[r] + logf(l[r]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, int D>
void launch_flash(const FlashArgs<T>& a, int64_t bh, cudaStream_t stream) {
  const int64_t tiles = ceil_div(a.L, kBlockRows);
  MINIDL_CHECK(bh <= 65535 && tiles <= 2147483647, "scaled_dot_product_attention: ", bh,
               " batch x heads exceed the tensor-core kernel's grid (at most 65535)");
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(bh));
  MINIDL_LAUNCH(flash_mma_forward_kernel<T, D>, grid, kFlashThreads, 0, stream, a);
}

template <typename T>
void flash_typed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, double dropout_p,
                 uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse, cudaStream_t stream) {
  FlashArgs<T> a{};
  a.q = static_cast<const T*>(q.raw_data());
  a.k = static_cast<const T*>(k.raw_data());
  a.v = static_cast<const T*>(v.raw_data());
  a.out = static_cast<T*>(out.raw_data());
  a.lse = lse.data<float>();
  a.q_b = q.strides()[0], a.q_h = q.strides()[1], a.q_row = q.strides()[2];
  a.k_b = k.strides()[0], a.k_h = k.strides()[1], a.k_row = k.strides()[2];
  a.v_b = v.strides()[0], a.v_h = v.strides()[1], a.v_row = v.strides()[2];
  a.H = q.shape()[1];
  a.L = q.shape()[2];
  a.S = k.shape()[2];
  a.scale = static_cast<float>(scale);
  a.causal = causal;
  a.dropout = dropout_p > 0;
  a.keep = static_cast<float>(1.0 - dropout_p);
  a.inv_keep = dropout_p > 0 ? static_cast<float>(1.0 / (1.0 - dropout_p)) : 1.0f;
  a.seed = seed;
  a.offset = offset;
  // cp.async needs every row of q, k and v 16-byte aligned: pointers and all strides multiples of 8.
  a.vec = aligned16(a.q) && aligned16(a.k) && aligned16(a.v);
  const int64_t strides[] = {a.q_b, a.q_h, a.q_row, a.k_b, a.k_h, a.k_row, a.v_b, a.v_h, a.v_row};
  for (const int64_t st : strides) a.vec = a.vec && st % 8 == 0;
  const int64_t bh = q.shape()[0] * q.shape()[1];
  switch (q.shape()[3]) {
    case 16: launch_flash<T, 16>(a, bh, stream); break;
    case 32: launch_flash<T, 32>(a, bh, stream); break;
    case 64: launch_flash<T, 64>(a, bh, stream); break;
    default: launch_flash<T, 128>(a, bh, stream); break;
  }
}

}  // namespace

bool flash_mma_applies(const Tensor& q, const Tensor& k, const Tensor& v, int cc_major) {
  const DType dt = q.dtype();
  if (!has_mma_sync(cc_major) || (dt != DType::BFloat16 && dt != DType::Float16)) return false;
  if (k.dtype() != dt || v.dtype() != dt) return false;
  const int64_t d = q.shape()[3];
  if (k.shape()[3] != d || v.shape()[3] != d || (d != 16 && d != 32 && d != 64 && d != 128)) return false;
  return q.strides()[3] == 1 && k.strides()[3] == 1 && v.strides()[3] == 1;
}

void flash_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, double dropout_p,
                       uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse, cudaStream_t stream) {
  if (q.dtype() == DType::BFloat16) flash_typed<__nv_bfloat16>(q, k, v, causal, scale, dropout_p, seed, offset, out, lse, stream);
  else flash_typed<__half>(q, k, v, causal, scale, dropout_p, seed, offset, out, lse, stream);
}

}  // namespace minidl::cuda
