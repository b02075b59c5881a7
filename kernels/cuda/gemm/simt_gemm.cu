// The hand-written SGEMM of the CUDA backend, with the bias and ReLU fused into its epilogue:
// float32 math on float32, bfloat16 or float16 matrices.
//
// Math:   C[M, N] = act(op(A) · op(B) + bias),  C[i, j] = act(Σ_p op(A)[i, p] · op(B)[p, j] + bias[j])
// Shapes: row-major with leading dimensions (gemm.h, GemmProblem): A is [M, K] or, transposed,
//         [K, M]; B is [K, N] or [N, K]; bias [N] or none; any M, N, K >= 1. A, B, C and bias
//         share one dtype: float32, bfloat16 or float16.
//
// Strategy (one thread block per BM×BN tile of C, 1-D grid, M tiles fastest):
//   - K is walked in steps of BK. Each step stages op(A)[BM, BK] and op(B)[BK, BN] in shared
//     memory, both stored k-major ([BK][BM] and [BK][BN], rows padded by 4 floats) so that the
//     inner loop reads a row of each. Transposes live in the load pattern only: an operand whose
//     memory runs along k (A, or Bᵀ) is read as float4 along k and scattered into 4 shared rows;
//     one whose memory runs along M or N (Aᵀ, or B) is read as float4 along M/N and stored as is.
//   - Double buffering: while the block computes on one shared buffer, each thread holds the next
//     step's float4s in registers and writes them to the other buffer afterwards; one
//     __syncthreads per K step.
//   - Warp tiling: the block tile is split into WARPS_M × WARPS_N warp tiles of WM×WN. A warp tile
//     is covered in WMITER × WNITER sub-tiles of 32×16; in each, the 32 lanes form an 8×4 grid and
//     own 4×4 outputs. A thread therefore keeps (4·WMITER)×(4·WNITER) accumulators in registers
//     (8×8 in the large tile) and per k reads WMITER + WNITER float4s from shared memory: 8 lanes
//     read 8 distinct A float4s (128 contiguous bytes, no bank conflict), 4 read distinct B ones.
//   - Global loads are 16-byte float4s when the operand's pointer is 16-byte aligned, its leading
//     dimension a multiple of 4, and the 4 elements are inside the matrix; otherwise (edges, K
//     tails, odd leading dimensions, offset views) a guarded scalar path reads what exists and
//     zero-fills the rest, so the inner loop never branches and padding adds 0·0 terms only.
//   - Epilogue: + bias[j], ReLU, and a guarded store (float4 when C allows, scalar otherwise).
//
// 16-bit matrices (bfloat16, float16): the kernel is templated on the element type it reads
// (TIn, of A and B) and the one it writes (TOut, of C and bias), and half.cuh's to_float /
// from_float / vec4_t do the conversions, so float32 is the TIn = TOut = float case of the same
// code. A vector is 4 elements either way: one 8-byte uint2 load of 16-bit elements where a
// float32 operand takes a 16-byte float4, under the same conditions (pointer aligned to the
// vector, leading dimension and batch stride multiples of 4), else the guarded scalar path.
// The prefetch registers hold the 16-bit elements as read (half as many registers as float32);
// they are widened to float32 (exact) as they are stored to shared memory, so shared memory, the
// inner loop and the accumulators are the float32 kernel's. The epilogue widens the 16-bit bias,
// adds it, applies ReLU and rounds each output once to the nearest even 16-bit value as it
// stores it (4 at a time in a uint2 when C allows). With split K the slices write float32
// partials (TOut = float) and splitk_reduce_kernel rounds their sum once into the 16-bit C. So a
// 16-bit product has the bits of the float32 kernel run on the widened operands with the same
// plan and then rounded: the same float32 operations in the same order.
//
// Tile configurations (block tile BM×BN, K step BK; sizes and residency in gemm_plan.h):
//   Large  128×128×8,  256 threads = 8 warps (2×4) of 64×32, 8×8 outputs per thread, 2 blocks/SM
//   Medium  64×64×16,  128 threads = 4 warps (2×2) of 32×32, 4×8 outputs per thread, 4 blocks/SM
//   Small   32×32×16,   64 threads = 2 warps (1×2) of 32×16, 4×4 outputs per thread, 8 blocks/SM
//   and a candidate the heuristic never picks, measured by bench_kernels' plan sweep:
//   Large  128×128×16, the large tile with half the barriers per K; 161–167 registers a thread,
//          so its launch bounds promise 1 block/SM (on an H200 it ran no faster at 4096³).
// Blocks/SM is what the launch bounds guarantee (<= 128 registers a thread: 65536 / (threads ·
// 128)), 16 warps a multiprocessor in each. Per k a thread does 64, 32 or 16 FMAs for 4, 3 or 2
// shared float4 reads, and a block does BM·BN/(BM+BN) = 64, 32 or 16 FMAs per float it loads:
// the large tile is the one that keeps the FMA pipes busy. Shared memory (two buffers): 16.5,
// 17 and 9 KiB.
//
// Plans (native_gemm_plan, gemm_plan.cpp), on T tiles of C and a device of P multiprocessors:
//   1. the large, else the medium tile when T >= P: whole K (4096² → large, 1024 tiles; 1024²
//      and the MLP's 4096×256×784 forward → medium, 256 tiles);
//   2. tall and thin (K >= M + N, K >= 2·128): the large, else the medium tile split into
//      S = min(P·blocks_per_SM / T, K / 128, 32) K slices, when T·S >= P: at most one wave of
//      resident blocks, each slice a multiple of BK and at least 128 long;
//   3. else the small tile: whole K, or, when T <= P/2 and K >= 2·128, S = min(ceil(P / T),
//      K / 128, 32) slices (the MLP's 128×256×784 → 5 slices of 160, 160 blocks).
// Why 2: the weight gradient of a linear layer at a large batch is C[out, in] with K = batch. On
// an H200 (132 SMs) 256×784×4096 has 200 small tiles, and the small tile with whole K reaches
// 0.39 of cuBLAS there: 3 warps per SM, 16 FMAs per float loaded. Step 2 makes it 14 large
// tiles × 18 slices of 232 = 252 blocks, one wave of the 264 slots (16 warps per SM, as in
// 4096², where the large tile reaches 0.85), each block 29 K steps. The partials cost S·M·N·4
// bytes written and read once: 14.4 MB each way against 16.8 MB of A and B (~7 µs even from
// HBM; one wave of large tiles is at most 264·128²·4 B = 17 MiB, which stays in the 50 MB L2
// between the two kernels). cuBLAS takes 69 µs, so 0.8 of it allows 87 µs: 80 µs for
// 1.64 GFLOP is 20.5 TFLOP/s, half of what the large tile sustains at 4096² (41.5).
// 128×256×4096 → 8 medium tiles × 32 slices of 128 (256 blocks; partials 4 MB each way vs 6 MB
// of A and B). 10×128×4096 → step 3, 32 small slices of 128: its few blocks are latency-bound,
// so the shorter each one's K loop, the sooner it ends. The MLP's batch-128 products (K <= 784)
// and the square ones keep the plans of steps 1 and 3. bench_kernels times other candidates
// beside these (its gemm_plan lines), so a device where another plan wins shows it.
//
// Split K: grid.y = S, slice s writes its partial product to the float32 workspace [S, M, N]
// (whatever C's dtype), and splitk_reduce_kernel adds the S partials in order, then bias and
// ReLU, and stores C in its dtype.
//
// Batches (GemmProblem::batch, the strided-batched product of matmul over [..., M, K]): grid.z
// is the product, whose operands and output sit at fixed strides from the first one's; each
// block offsets its three pointers by blockIdx.z strides and is otherwise the 2-D kernel
// (batch 1 is z = 0: the 2-D path pays one multiply-add per pointer). A grid holds at most
// 65535 in z, so a longer batch is launched in chunks of that many. A batch keeps K whole
// (native_batched_gemm_plan): its products, not K slices, fill the device.
//
// Determinism: every output (or partial) is one thread's sequential sum over k in a fixed order,
// and the split count depends only on the shape and the device's multiprocessor count.
#include "kernels/cuda/gemm/gemm.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/epilogue.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

// Shared-memory rows are padded by 4 floats: rows stay 16-byte aligned for float4 reads, and
// the k-scattered stores of a warp (16 rows × 2 k-groups in the large tile) hit 32 banks.
constexpr int kSmemPad = 4;

// A tile configuration: the block tile, K step and residency come from gemm_plan.h (the plan
// reasons with the same numbers); the warp layout is the kernel's own.
template <GemmTile TILE, int WM_, int WN_, int WMITER_, int WNITER_>
struct TileConfig {
  static constexpr GemmTileShape kShape = gemm_tile_shape(TILE);
  static constexpr int BM = kShape.bm, BN = kShape.bn, BK = kShape.bk;  // block tile and K step
  static constexpr int WM = WM_, WN = WN_;                                // warp tile
  static constexpr int WMITER = WMITER_, WNITER = WNITER_;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = WARPS_M * WARPS_N * kWarpSize;
  static constexpr int SUB_M = WM / WMITER, SUB_N = WN / WNITER;  // one pass of a warp's 32 lanes
  static constexpr int LANES_M = SUB_M / 4, LANES_N = SUB_N / 4;  // lane grid, 4×4 outputs each
  static constexpr int TM = 4 * WMITER, TN = 4 * WNITER;          // outputs per thread
  static constexpr int MIN_BLOCKS = kShape.min_blocks;            // resident blocks the launch bounds promise
  static constexpr int LDS_A = BM + kSmemPad, LDS_B = BN + kSmemPad;

  static_assert(THREADS == kShape.threads, "the warp layout must have the threads gemm_plan.h states");
  static_assert(65536 / (MIN_BLOCKS * THREADS) >= 128,
                "min_blocks must leave each thread at least 128 of the multiprocessor's 65536 registers");
  static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must cover the block tile");
  static_assert(WM % WMITER == 0 && WN % WNITER == 0, "sub-tiles must cover the warp tile");
  static_assert(LANES_M * LANES_N == kWarpSize, "a sub-tile is 32 lanes of 4x4 outputs");
  static_assert(BK % 4 == 0 && BM % 4 == 0 && BN % 4 == 0, "4-element vector loads need multiples of 4");
  static_assert((BM * BK / 4) % THREADS == 0 && (BN * BK / 4) % THREADS == 0, "loads must split evenly");
};

using LargeTile = TileConfig<GemmTile::Large128x128, 64, 32, 2, 2>;
using MediumTile = TileConfig<GemmTile::Medium64x64, 32, 32, 1, 2>;
using SmallTile = TileConfig<GemmTile::Small32x32, 32, 16, 1, 1>;
using LargeTileK16 = TileConfig<GemmTile::Large128x128K16, 64, 32, 2, 2>;

// Everything a launch needs, by value in the kernel's parameter space. TIn is the element type
// of A and B; TOut that of C and bias: TIn, or float for the partials of split K (bias nullptr).
template <typename TIn, typename TOut>
struct SgemmArgs {
  const TIn* a = nullptr;
  const TIn* b = nullptr;
  TOut* c = nullptr;
  const TOut* bias = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int m = 0, n = 0, k = 0;
  int tiles_m = 0;  // blocks along M; block x computes tile (x % tiles_m, x / tiles_m)
  int k_split = 0;  // K values per slice; block y takes k in [y·k_split, min(K, (y+1)·k_split))
  int64_t split_stride = 0;  // elements between the outputs of consecutive slices (0: one slice)
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // elements between consecutive products (grid.z)
  TOut* gelu_out = nullptr;  // C's layout; written when act.gelu
  EpilogueAct act;           // ReLU or GELU (epilogue.cuh)
  bool vec_a = false, vec_b = false, vec_c = false;  // 4-element vector access allowed (vec4_t)
};

// ---- kernels ----

// One operand's slice of a K step: X rows of M (for A) or N (for B) by BK values of k, moved
// global -> registers (load) -> shared memory (store) as THREADS threads' vectors of 4 elements
// of T (vec4_t: a float4, or a uint2 of 16-bit elements, widened to float32 by store()).
// K_CONTIG: memory runs along k (A, or Bᵀ): slot s is row x = s / (BK/4), k = 4·(s % (BK/4)),
//           and is scattered into shared rows k..k+3 at column x.
// otherwise memory runs along x (Aᵀ, or B): slot s is k = s / (X/4), x = 4·(s % (X/4)), stored
//           as one float4 into shared row k. Consecutive threads read consecutive addresses.
template <typename T, int X, int BK, int THREADS, bool K_CONTIG>
struct OperandTile {
  static constexpr int kVecs = X * BK / 4 / THREADS;
  static constexpr int kLds = X + kSmemPad;
  vec4_t<T> v[kVecs];  // 4 elements each, as read from global memory

  __device__ static void slot(int s, int& x, int& kk) {
    if constexpr (K_CONTIG) {
      x = s / (BK / 4);
      kk = (s % (BK / 4)) * 4;
    } else {
      kk = s / (X / 4);
      x = (s % (X / 4)) * 4;
    }
  }

  // `base` points at element (x = 0, k = 0) of this slice; x_left / k_left are how many rows /
  // k values of the matrix remain from there (may exceed X / BK). Outside them: zeros.
  __device__ void load(const T* __restrict__ base, int64_t ld, int x_left, int k_left, bool vec, int tid) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      int x, kk;
      slot(tid + i * THREADS, x, kk);
      const T* p = K_CONTIG ? base + x * ld + kk : base + kk * ld + x;
      const bool line_ok = K_CONTIG ? x < x_left : kk < k_left;  // the row of memory exists
      const int run = K_CONTIG ? k_left - kk : x_left - x;         // elements left along it
      if (vec && line_ok && run >= 4) {
        v[i] = *reinterpret_cast<const vec4_t<T>*>(p);  // aligned: checked on the host (vec)
      } else {
        float f[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) f[q] = line_ok && run > q ? to_float(p[q]) : 0.0f;
        v[i] = pack4<T>(f);  // exact: each value is a T
      }
    }
  }

  __device__ void store(float* __restrict__ smem, int tid) const {  // smem: tile [BK, X + pad]
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      int x, kk;
      slot(tid + i * THREADS, x, kk);
      float f[4];
      unpack4<T>(v[i], f);  // widened to float32: exact
      if constexpr (K_CONTIG) {
#pragma unroll
        for (int q = 0; q < 4; ++q) smem[(kk + q) * kLds + x] = f[q];
      } else {
        *reinterpret_cast<float4*>(smem + kk * kLds + x) = make_float4(f[0], f[1], f[2], f[3]);
      }
    }
  }
};

template <class Cfg, typename TIn, typename TOut, bool TRANS_A, bool TRANS_B>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) sgemm_tiled_kernel(const SgemmArgs<TIn, TOut> args) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK;
  constexpr int LDS_A = Cfg::LDS_A, LDS_B = Cfg::LDS_B;
  constexpr int TM = Cfg::TM, TN = Cfg::TN;
  __shared__ __align__(16) float a_smem[2][BK * LDS_A];  // tile [BK, BM] (+pad) in shared memory, two buffers
  __shared__ __align__(16) float b_smem[2][BK * LDS_B];  // tile [BK, BN] (+pad) in shared memory, two buffers

  const int tid = static_cast<int>(threadIdx.x);
  const int tile_m = static_cast<int>(blockIdx.x % static_cast<unsigned>(args.tiles_m));
  const int tile_n = static_cast<int>(blockIdx.x / static_cast<unsigned>(args.tiles_m));
  const int m0 = tile_m * BM, n0 = tile_n * BN;  // block tile origin in C
  const int m_left = args.m - m0, n_left = args.n - n0;
  const int k_begin = static_cast<int>(blockIdx.y) * args.k_split;  // this block's slice of K
  const int k_len = min(args.k - k_begin, args.k_split);
  const int64_t product = blockIdx.z;  // which product of a batch (0 for a single GEMM)
  TOut* const c = args.c + product * args.stride_c + blockIdx.y * args.split_stride;  // C, or this slice's partial
  TOut* const gelu_out = args.act.gelu ? args.gelu_out + product * args.stride_c : nullptr;  // never split
  const TIn* const a = args.a + product * args.stride_a;
  const TIn* const b = args.b + product * args.stride_b;

  // Which outputs this thread owns: warp tile (warp_m, warp_n), lane (lane_m, lane_n) in each
  // 32×16 sub-tile; local row of accumulator i·4 + r is warp_m·WM + i·SUB_M + lane_m·4 + r.
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int warp_m = warp / Cfg::WARPS_N, warp_n = warp % Cfg::WARPS_N;
  const int lane_m = lane / Cfg::LANES_N, lane_n = lane % Cfg::LANES_N;
  const int row_base = warp_m * Cfg::WM + lane_m * 4;  // + i·SUB_M + r
  const int col_base = warp_n * Cfg::WN + lane_n * 4;  // + j·SUB_N + q

  // Slice origins at k = k_begin and their step per K tile: A [M, K] (or Aᵀ stored [K, M]),
  // B [K, N] (or Bᵀ stored [N, K]).
  const TIn* a_slice = TRANS_A ? a + static_cast<int64_t>(k_begin) * args.lda + m0
                               : a + static_cast<int64_t>(m0) * args.lda + k_begin;
  const TIn* b_slice = TRANS_B ? b + static_cast<int64_t>(n0) * args.ldb + k_begin
                               : b + static_cast<int64_t>(k_begin) * args.ldb + n0;
  const int64_t a_step = TRANS_A ? BK * args.lda : BK;
  const int64_t b_step = TRANS_B ? BK : BK * args.ldb;

  OperandTile<TIn, BM, BK, Cfg::THREADS, !TRANS_A> a_tile;
  OperandTile<TIn, BN, BK, Cfg::THREADS, TRANS_B> b_tile;

  float acc[TM][TN];  // outputs [TM, TN] in registers
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  const int k_tiles = (k_len + BK - 1) / BK;
  a_tile.load(a_slice, args.lda, m_left, k_len, args.vec_a, tid);
  b_tile.load(b_slice, args.ldb, n_left, k_len, args.vec_b, tid);
  a_tile.store(a_smem[0], tid);
  b_tile.store(b_smem[0], tid);
  __syncthreads();

  for (int t = 0; t < k_tiles; ++t) {
    const int cur = t & 1;
    const bool has_next = t + 1 < k_tiles;
    if (has_next) {  // next K step into registers; its latency hides behind the math below
      a_slice += a_step;
      b_slice += b_step;
      const int k_left = k_len - (t + 1) * BK;
      a_tile.load(a_slice, args.lda, m_left, k_left, args.vec_a, tid);
      b_tile.load(b_slice, args.ldb, n_left, k_left, args.vec_b, tid);
    }

    const float* as = a_smem[cur];
    const float* bs = b_smem[cur];
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float af[TM], bf[TN];  // fragments [TM] of op(A)'s column kk and [TN] of op(B)'s row kk
#pragma unroll
      for (int i = 0; i < Cfg::WMITER; ++i) {
        const float4 v = *reinterpret_cast<const float4*>(as + kk * LDS_A + row_base + i * Cfg::SUB_M);
        af[i * 4 + 0] = v.x;
        af[i * 4 + 1] = v.y;
        af[i * 4 + 2] = v.z;
        af[i * 4 + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < Cfg::WNITER; ++j) {
        const float4 v = *reinterpret_cast<const float4*>(bs + kk * LDS_B + col_base + j * Cfg::SUB_N);
        bf[j * 4 + 0] = v.x;
        bf[j * 4 + 1] = v.y;
        bf[j * 4 + 2] = v.z;
        bf[j * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(af[i], bf[j], acc[i][j]);
    }

    // The other buffer was last read in step t - 1, which every thread finished before the
    // __syncthreads that ended it; this step's readers of `cur` are not disturbed.
    if (has_next) {
      a_tile.store(a_smem[cur ^ 1], tid);
      b_tile.store(b_smem[cur ^ 1], tid);
    }
    __syncthreads();
  }

  // Epilogue: + bias, ReLU or GELU, store what lies inside C (rounded once to TOut; epilogue.cuh).
#pragma unroll
  for (int j = 0; j < Cfg::WNITER; ++j) {
    const int col = col_base + j * Cfg::SUB_N;  // first of 4 columns, local to the tile
    float bias4[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      bias4[q] = args.bias != nullptr && col + q < n_left ? to_float(args.bias[n0 + col + q]) : 0.0f;
#pragma unroll
    for (int i = 0; i < Cfg::WMITER; ++i) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int row = row_base + i * Cfg::SUB_M + r;
        if (row >= m_left) continue;
        const int64_t at = static_cast<int64_t>(m0 + row) * args.ldc + (n0 + col);  // in C and gelu_out
        if (args.vec_c && col + 3 < n_left) {
          float o[4], g[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            o[q] = acc[i * 4 + r][j * 4 + q] + bias4[q];
            if (args.act.relu && o[q] < 0.0f) o[q] = 0.0f;
            g[q] = args.act.gelu ? gelu_value(to_float(from_float<TOut>(o[q])), args.act.gelu_form) : 0.0f;
          }
          *reinterpret_cast<vec4_t<TOut>*>(c + at) = pack4<TOut>(o);
          if (args.act.gelu) *reinterpret_cast<vec4_t<TOut>*>(gelu_out + at) = pack4<TOut>(g);
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q)
            if (col + q < n_left) store_epilogue(c, gelu_out, at + q, acc[i * 4 + r][j * 4 + q] + bias4[q], args.act);
        }
      }
    }
  }
}

// C[i, j] = act(Σ_s partial[s, i, j] + bias[j]) for float32 partial [splits, M, N]: the split-K
// sum, in slice order, in float32, rounded once to C's type T. Grid-stride over the M·N outputs;
// consecutive threads take consecutive j.
template <typename T>
__global__ void splitk_reduce_kernel(const float* __restrict__ partial, int64_t splits, int64_t m, int64_t n,
                                     T* __restrict__ c, int64_t ldc, const T* __restrict__ bias,
                                     T* __restrict__ gelu_out, EpilogueAct act) {
  const int64_t total = m * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    float v = 0.0f;
    for (int64_t s = 0; s < splits; ++s) v += partial[s * total + idx];
    if (bias != nullptr) v += to_float(bias[j]);
    store_epilogue(c, gelu_out, i * ldc + j, v, act);
  }
}

// ---- launchers ----

constexpr int kReduceThreads = 256;
constexpr int64_t kMaxGridZ = 65535;

// Whether the kernel may move 4 elements of T at once from p: p aligned to the vector (16 bytes
// of float32, 8 of 16-bit elements), and every row (ld apart) and product (stride apart) too.
template <typename T>
bool vectors_allowed(const void* p, int64_t ld, int64_t stride) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(vec4_t<T>) == 0 && ld % 4 == 0 && stride % 4 == 0;
}

template <class Cfg, bool TRANS_A, bool TRANS_B, typename TIn, typename TOut>
void launch_sgemm(SgemmArgs<TIn, TOut> args, int64_t splits, int64_t batch, cudaStream_t stream) {
  const int64_t tiles_m = ceil_div(args.m, Cfg::BM);
  const int64_t blocks = tiles_m * ceil_div(args.n, Cfg::BN);
  MINIDL_CHECK(blocks <= INT32_MAX, "native_sgemm: ", args.m, "x", args.n, " needs ", blocks,
               " thread blocks of ", Cfg::BM, "x", Cfg::BN, ", more than a grid holds");
  args.tiles_m = static_cast<int>(tiles_m);
  // Products [first, first + count) of the batch per launch: grid.z holds at most 65535.
  for (int64_t first = 0; first < batch; first += kMaxGridZ) {
    const int64_t count = std::min(batch - first, kMaxGridZ);
    SgemmArgs<TIn, TOut> chunk = args;
    chunk.a += first * args.stride_a;
    chunk.b += first * args.stride_b;
    chunk.c += first * args.stride_c;
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits), static_cast<unsigned>(count));
    MINIDL_LAUNCH(sgemm_tiled_kernel<Cfg, TIn, TOut, TRANS_A, TRANS_B>, grid, Cfg::THREADS, 0, stream, chunk);
  }
}

template <class Cfg, typename TIn, typename TOut>
void launch_for_transposes(bool trans_a, bool trans_b, const SgemmArgs<TIn, TOut>& args, int64_t splits,
                           int64_t batch, cudaStream_t stream) {
  if (trans_a) {
    if (trans_b) launch_sgemm<Cfg, true, true>(args, splits, batch, stream);
    else launch_sgemm<Cfg, true, false>(args, splits, batch, stream);
  } else {
    if (trans_b) launch_sgemm<Cfg, false, true>(args, splits, batch, stream);
    else launch_sgemm<Cfg, false, false>(args, splits, batch, stream);
  }
}

template <typename TIn, typename TOut>
void launch_for_plan(const GemmProblem& p, const NativeGemmPlan& plan, const SgemmArgs<TIn, TOut>& args,
                     cudaStream_t stream) {
  switch (plan.tile) {
    case GemmTile::Large128x128:
      launch_for_transposes<LargeTile>(p.trans_a, p.trans_b, args, plan.splits, p.batch, stream);
      break;
    case GemmTile::Medium64x64:
      launch_for_transposes<MediumTile>(p.trans_a, p.trans_b, args, plan.splits, p.batch, stream);
      break;
    case GemmTile::Small32x32:
      launch_for_transposes<SmallTile>(p.trans_a, p.trans_b, args, plan.splits, p.batch, stream);
      break;
    case GemmTile::Large128x128K16:
      launch_for_transposes<LargeTileK16>(p.trans_a, p.trans_b, args, plan.splits, p.batch, stream);
      break;
  }
}

// A launch's fields for A, B and the shape of p on `plan`; the caller fills in C's.
template <typename T, typename TOut>
SgemmArgs<T, TOut> operand_args(const GemmProblem& p, const NativeGemmPlan& plan) {
  SgemmArgs<T, TOut> args;
  args.a = static_cast<const T*>(p.a);
  args.b = static_cast<const T*>(p.b);
  args.lda = p.lda;
  args.ldb = p.ldb;
  args.m = static_cast<int>(p.m);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.k_split = static_cast<int>(plan.k_split);  // <= K rounded up to BK (check_gemm_plan): fits an int
  args.stride_a = p.stride_a;
  args.stride_b = p.stride_b;
  // Vector access needs every product's matrix aligned, not only the first one's.
  args.vec_a = vectors_allowed<T>(p.a, p.lda, p.stride_a);
  args.vec_b = vectors_allowed<T>(p.b, p.ldb, p.stride_b);
  return args;
}

// The product on `plan` with elements of T: the tiled kernel writes C (in T), or, when the plan
// splits K, float32 partials into `workspace` that splitk_reduce_kernel sums into C.
template <typename T>
void native_sgemm_typed(const GemmProblem& p, const NativeGemmPlan& plan, int sm_count, float* workspace,
                        cudaStream_t stream) {
  if (plan.splits == 1) {
    SgemmArgs<T, T> args = operand_args<T, T>(p, plan);
    args.c = static_cast<T*>(p.c);
    args.ldc = p.ldc;
    args.stride_c = p.stride_c;
    args.bias = static_cast<const T*>(p.bias);
    args.gelu_out = static_cast<T*>(p.gelu_out);
    args.act = epilogue_act(p);
    args.vec_c = vectors_allowed<T>(p.c, p.ldc, p.stride_c) &&
                 (p.gelu_out == nullptr || vectors_allowed<T>(p.gelu_out, p.ldc, p.stride_c));
    launch_for_plan(p, plan, args, stream);
    return;
  }
  // Slices write float32 partials [splits, M, N]; bias, ReLU and the rounding to T wait for their sum.
  SgemmArgs<T, float> args = operand_args<T, float>(p, plan);
  args.c = workspace;
  args.ldc = p.n;
  args.split_stride = p.m * p.n;
  args.vec_c = vectors_allowed<float>(workspace, p.n, 0);
  launch_for_plan(p, plan, args, stream);
  const unsigned blocks = grid_for(p.m * p.n, kReduceThreads, sm_count);
  MINIDL_LAUNCH(splitk_reduce_kernel<T>, blocks, kReduceThreads, 0, stream, workspace, plan.splits, p.m, p.n,
                static_cast<T*>(p.c), p.ldc, static_cast<const T*>(p.bias), static_cast<T*>(p.gelu_out),
                epilogue_act(p));
}

}  // namespace

void native_sgemm_with_plan(const GemmProblem& p, const NativeGemmPlan& plan, int sm_count, float* workspace,
                            cudaStream_t stream) {
  // The caller (linear.cu's run_gemm) handles empty products and derives the leading dimensions.
  MINIDL_INTERNAL_ASSERT(p.m >= 1 && p.n >= 1 && p.k >= 1, "M, N, K = ", p.m, ", ", p.n, ", ", p.k);
  MINIDL_INTERNAL_ASSERT(p.lda >= (p.trans_a ? p.m : p.k) && p.ldb >= (p.trans_b ? p.k : p.n) && p.ldc >= p.n,
                         "lda, ldb, ldc = ", p.lda, ", ", p.ldb, ", ", p.ldc);
  MINIDL_CHECK(p.m <= kMaxGemmDim && p.n <= kMaxGemmDim && p.k <= kMaxGemmDim, "native_sgemm: M, N, K = ", p.m,
               ", ", p.n, ", ", p.k, " exceed the supported ", kMaxGemmDim, " per dimension");
  check_gemm_plan(plan, p.m, p.n, p.k);
  MINIDL_CHECK(plan.splits == 1 || workspace != nullptr, "native_sgemm: ", p.m, "x", p.n, "x", p.k, " in ",
               plan.splits, " K slices needs a workspace of ", plan.workspace_floats(), " floats");
  MINIDL_CHECK(p.batch >= 1 && (p.batch == 1 || plan.splits == 1), "native_sgemm: a batch of ", p.batch, " products ",
               p.m, "x", p.n, "x", p.k, " runs on plans with whole K, got ", plan.splits, " K slices");
  // float32, bfloat16 or float16; any other dtype is an internal error (dispatch_float_and_half).
  dispatch_float_and_half(p.dtype, [&](auto tag) {
    native_sgemm_typed<decltype(tag)>(p, plan, sm_count, workspace, stream);
  });
}

void native_sgemm(const GemmProblem& p, int sm_count, float* workspace, cudaStream_t stream) {
  native_sgemm_with_plan(p, native_batched_gemm_plan(p.batch, p.m, p.n, p.k, sm_count), sm_count, workspace, stream);
}

}  // namespace minidl::cuda
