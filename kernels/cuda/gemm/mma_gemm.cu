// The tensor-core GEMM of the CUDA backend: bfloat16 or float16 matrices, float32 accumulation,
// on mma.sync.m16n8k16 (warp_matrix.cuh), with the bias and ReLU fused into its epilogue. Three
// rungs of one kernel, each a step a reader can run and time (docs/gemm-ladder.md):
//   mma           fragments read from shared memory one 16-bit element at a time, the tiles
//                 loaded synchronously (global -> registers -> shared), two barriers per K step;
//   mma_ldmatrix  + fragments by ldmatrix from a swizzled (bank-conflict-free) tile layout;
//   mma_pipeline  + the tiles loaded by cp.async into a ring of 3 stages, so the loads of the
//                 next two K steps fly while the warps multiply this one: one barrier per K step.
//                 This is the rung the planner picks (gemm_plan.h, choose_gemm_kernel).
//
// Math:   C[M, N] = act(op(A) · op(B) + bias), each output a float32 sum rounded once to 16 bits.
// Shapes: as the SIMT kernel's (gemm.h, GemmProblem): A [M, K] or, transposed, [K, M]; B [K, N]
//         or [N, K]; row-major with leading dimensions; any M, N, K >= 1; batches in grid.z.
//
// Strategy (one thread block per BM×BN tile of C, M tiles fastest along grid.x):
//   - K is walked in steps of BK = 32. Each step's op(A)[BM, 32] and op(B)[32, BN] sit in shared
//     memory as they lie in global memory: an operand whose rows run along k (A, or Bᵀ) as a
//     [X][32] tile ("k-contiguous"), the other (Aᵀ, or B) as a [32][X] tile ("x-contiguous"). The
//     transposes live in the choice of ldmatrix (plain or .trans), never in a copy.
//   - Tiles move in 16-byte chunks of 8 elements. With cp.async, a chunk at the matrix's edge
//     copies the bytes inside (src-size) and zero-fills the rest, so edge tiles need no branch in
//     the inner loop and no padded copy of the matrix; padding adds 0·0 terms only. A chunk can
//     move whole when the operand's pointer is 16-byte aligned and its leading dimension (and
//     batch stride) a multiple of 8; otherwise a guarded path reads element by element and
//     stores the chunk itself (correct at any alignment, slower).
//   - Swizzle (rungs with ldmatrix): ldmatrix has 8 lanes read 8 rows of 16 bytes at once. In a
//     k-contiguous tile rows are 64 bytes apart, so rows x and x + 2 start in the same banks; the
//     chunk index is XOR-ed with (x / 2) % 4, which spreads 8 consecutive rows over all 32 banks.
//     In an x-contiguous tile rows are 128 or 256 bytes apart (all in the same banks); the chunk
//     index is XOR-ed with k % 8.
//   - Warps: WARPS_M × WARPS_N warps, each a WM × WN warp tile of (WM/16) × (WN/8) mma tiles; per
//     16 of k a warp loads WM/16 A fragments (ldmatrix.x4 each) and WN/8 B fragments (ldmatrix.x4
//     per two) and issues (WM/16)·(WN/8) mma. Accumulators: WM·WN/32 floats a thread.
//   - Epilogue: + bias[j] (16-bit, widened), ReLU or GELU, one rounding, guarded stores of 16
//     bits (epilogue.cuh).
//
// Tiles (block tile BM×BN, BK = 32; shared memory for 3 stages of A and B):
//   large 128×128, 8 warps (2×4) of 64×32: 64 accumulators a thread; 48 KiB
//   small  64× 64, 4 warps (2×2) of 32×32: 32 accumulators a thread; 24 KiB
//
// Determinism: every output is one warp's fixed sequence of mma over k; no atomics, no split.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm/epilogue.cuh"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/warp_matrix.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kBK = 32;           // K step
constexpr int kChunk = 8;         // elements in a 16-byte chunk
constexpr int kStages = 3;        // cp.async ring (pipeline rung); the synchronous rungs use stage 0
constexpr int64_t kMaxGridZ = 65535;

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_>
struct MmaConfig {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int THREADS = WARPS_M * WARPS_N * kWarpSize;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WM / 16, NI = WN / 8;              // mma tiles per warp tile
  static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp tile is whole m16 x (2 x n8) tiles");
  static_assert(BM % 64 == 0 && BN % 64 == 0, "x-contiguous tiles swizzle over at least 8 chunks a row");
  static_assert((BM * kBK / kChunk) % THREADS == 0 && (BN * kBK / kChunk) % THREADS == 0, "chunks split evenly");
};
using MmaLarge = MmaConfig<128, 128, 2, 4>;
using MmaSmall = MmaConfig<64, 64, 2, 2>;

template <typename T>
struct MmaArgs {
  const T* a = nullptr;
  const T* b = nullptr;
  T* c = nullptr;
  const T* bias = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int m = 0, n = 0, k = 0;
  int tiles_m = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  T* gelu_out = nullptr;  // C's layout; written when act.gelu
  EpilogueAct act;        // ReLU or GELU (epilogue.cuh)
  bool vec_a = false, vec_b = false;  // whole 16-byte chunks allowed (alignment, ld, stride)
};

// Where element (x, k) of an operand's K-step tile lives in shared memory, in elements: x is the
// row of A (m) or column of B (n). K_CONTIG: a [X][32] tile; otherwise [32][X]. The XOR moves
// whole 16-byte chunks, so a chunk stays contiguous and 16-byte aligned.
template <int X, bool K_CONTIG, bool SWIZZLE>
__device__ __forceinline__ int tile_offset(int x, int k) {
  if constexpr (K_CONTIG) {
    const int chunk = (k / kChunk) ^ (SWIZZLE ? (x >> 1) & 3 : 0);
    return x * kBK + chunk * kChunk + (k % kChunk);
  } else {
    const int chunk = (x / kChunk) ^ (SWIZZLE ? k & 7 : 0);
    return k * X + chunk * kChunk + (x % kChunk);
  }
}

// Moves one operand's K step, X × 32 elements, into a shared tile in 16-byte chunks: chunk s is
// row x = s / 4, k = 8·(s % 4) of a k-contiguous tile, or row k = s / (X/8), x = 8·(s % (X/8))
// of an x-contiguous one; consecutive threads take consecutive chunks (coalesced reads).
// `base` is element (x = 0, k = 0) of this block's operand; x_total and k_total bound the matrix.
template <typename T, int X, int THREADS, bool K_CONTIG, bool SWIZZLE, bool ASYNC>
__device__ __forceinline__ void load_tile(uint16_t* tile, const T* __restrict__ base, int64_t ld, int x_total,
                                          int k0, int k_total, bool vec, int tid) {
  constexpr int kChunks = X * kBK / kChunk;
  const uint16_t* src = reinterpret_cast<const uint16_t*>(base);
#pragma unroll
  for (int i = 0; i < kChunks / THREADS; ++i) {
    const int s = tid + i * THREADS;
    int x, k;
    if constexpr (K_CONTIG) {
      x = s / (kBK / kChunk);
      k = (s % (kBK / kChunk)) * kChunk;
    } else {
      k = s / (X / kChunk);
      x = (s % (X / kChunk)) * kChunk;
    }
    // Elements of this chunk inside the matrix: along k (K_CONTIG) or along x, if its line exists.
    const int kg = k0 + k;
    const bool line = K_CONTIG ? x < x_total : kg < k_total;
    const int run = K_CONTIG ? k_total - kg : x_total - x;
    const int valid = line ? max(0, min(kChunk, run)) : 0;
    const uint16_t* p = K_CONTIG ? src + x * ld + kg : src + static_cast<int64_t>(kg) * ld + x;
    uint16_t* dst = tile + tile_offset<X, K_CONTIG, SWIZZLE>(x, k);
    if (vec && ASYNC) {
      wm::cp_async_16(dst, valid > 0 ? p : src, valid * 2);
    } else if (vec && valid == kChunk) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(p);
    } else {
      uint16_t e[kChunk];
#pragma unroll
      for (int q = 0; q < kChunk; ++q) e[q] = q < valid ? p[q] : 0;
      *reinterpret_cast<uint4*>(dst) = make_uint4(wm::pack_b16(e[0], e[1]), wm::pack_b16(e[2], e[3]),
                                                  wm::pack_b16(e[4], e[5]), wm::pack_b16(e[6], e[7]));
    }
  }
}

enum class Rung : uint8_t { Mma, Ldmatrix, Pipeline };

template <class Cfg, typename T, bool TRANS_A, bool TRANS_B, Rung RUNG>
__global__ void __launch_bounds__(Cfg::THREADS, 1) mma_gemm_kernel(const MmaArgs<T> args) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, MI = Cfg::MI, NI = Cfg::NI;
  constexpr bool A_KC = !TRANS_A, B_KC = TRANS_B;  // k-contiguous tiles: A, and Bᵀ
  constexpr bool SWIZZLE = RUNG != Rung::Mma;
  constexpr bool ASYNC = RUNG == Rung::Pipeline;
  constexpr int STAGES = ASYNC ? kStages : 1;
  constexpr bool BF16 = std::is_same_v<T, __nv_bfloat16>;
  __shared__ __align__(128) uint16_t a_smem[STAGES][BM * kBK];
  __shared__ __align__(128) uint16_t b_smem[STAGES][BN * kBK];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int group = lane >> 2, tig = lane & 3;  // the PTX ISA's groupID, threadID_in_group
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::WM, wn0 = (warp % Cfg::WARPS_N) * Cfg::WN;
  const int m0 = static_cast<int>(blockIdx.x % static_cast<unsigned>(args.tiles_m)) * BM;
  const int n0 = static_cast<int>(blockIdx.x / static_cast<unsigned>(args.tiles_m)) * BN;
  const int64_t product = blockIdx.z;
  // This block's corner of A and B: element (x = 0, k = 0) of its tiles.
  const T* const a = args.a + product * args.stride_a + (TRANS_A ? m0 : m0 * args.lda);
  const T* const b = args.b + product * args.stride_b + (TRANS_B ? n0 * args.ldb : n0);
  const int m_left = args.m - m0, n_left = args.n - n0;

  auto load_stage = [&](int stage, int kt) {
    load_tile<T, BM, Cfg::THREADS, A_KC, SWIZZLE, ASYNC>(a_smem[stage], a, args.lda, m_left, kt * kBK, args.k,
                                                         args.vec_a, tid);
    load_tile<T, BN, Cfg::THREADS, B_KC, SWIZZLE, ASYNC>(b_smem[stage], b, args.ldb, n_left, kt * kBK, args.k,
                                                         args.vec_b, tid);
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

  // The warp's mma over one K step held in shared memory.
  auto compute = [&](const uint16_t* as, const uint16_t* bs) {
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[MI][4], bf[NI][2];
      if constexpr (RUNG == Rung::Mma) {
        // Each register from two elements, where the fragment layout (warp_matrix.cuh) puts them.
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = wm0 + i * 16 + group + 8 * (r & 1), k = kk + 2 * tig + 8 * (r >> 1);
            af[i][r] = wm::pack_b16(as[tile_offset<BM, A_KC, false>(row, k)], as[tile_offset<BM, A_KC, false>(row, k + 1)]);
          }
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int col = wn0 + j * 8 + group, k = kk + 2 * tig + 8 * r;
            bf[j][r] = wm::pack_b16(bs[tile_offset<BN, B_KC, false>(col, k)], bs[tile_offset<BN, B_KC, false>(col, k + 1)]);
          }
      } else {
        // A: four 8×8 quarters (rows 0-7 / 8-15 × k 0-7 / 8-15) in the order of a[0..3]. Lane l
        // addresses row l % 8 of quarter q = l / 8: rows (q & 1)·8, k (q >> 1)·8.
        const int q = lane >> 3, j8 = lane & 7;
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          const int row = wm0 + i * 16 + (q & 1) * 8, k = kk + (q >> 1) * 8;
          if constexpr (A_KC) wm::ldmatrix<4, false>(af[i], as + tile_offset<BM, true, true>(row + j8, k));
          else wm::ldmatrix<4, true>(af[i], as + tile_offset<BM, false, true>(row, k + j8));
        }
        // B: two n8 tiles per ldmatrix.x4, quarters (tile 0, k 0-7), (tile 0, k 8-15), (tile 1, ...).
#pragma unroll
        for (int j = 0; j < NI; j += 2) {
          const int col = wn0 + (j + (q >> 1)) * 8, k = kk + (q & 1) * 8;
          uint32_t r[4];
          if constexpr (B_KC) wm::ldmatrix<4, false>(r, bs + tile_offset<BN, true, true>(col + j8, k));
          else wm::ldmatrix<4, true>(r, bs + tile_offset<BN, false, true>(col, k + j8));
          bf[j][0] = r[0];
          bf[j][1] = r[1];
          bf[j + 1][0] = r[2];
          bf[j + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) wm::mma_m16n8k16<BF16>(acc[i][j], af[i], bf[j], acc[i][j]);
    }
  };

  const int k_tiles = (args.k + kBK - 1) / kBK;
  if constexpr (ASYNC) {
    // Prologue: the first STAGES - 1 steps in flight, one commit group each (empty past the end,
    // so that group g is always step g and the wait below counts right).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) load_stage(s, s);
      wm::cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      wm::cp_async_wait<STAGES - 2>();  // this thread's copies of step kt have landed...
      __syncthreads();                  // ...and every thread's; and step kt - 1's stage is free
      const int next = kt + STAGES - 1;
      if (next < k_tiles) load_stage(next % STAGES, next);
      wm::cp_async_commit();
      compute(a_smem[kt % STAGES], b_smem[kt % STAGES]);
    }
  } else {
    for (int kt = 0; kt < k_tiles; ++kt) {
      __syncthreads();  // every warp is done with the previous step's tile
      load_stage(0, kt);
      __syncthreads();
      compute(a_smem[0], b_smem[0]);
    }
  }

  // Epilogue: c[i] of tile (i, j) is C[row0 + group + 8·(i / 2)][col0 + 2·tig + (i % 2)].
  T* const c = args.c + product * args.stride_c;
  T* const gelu_out = args.act.gelu ? args.gelu_out + product * args.stride_c : nullptr;
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int col = wn0 + j * 8 + 2 * tig;  // local to the block tile; this lane's two columns
    float bias2[2];
#pragma unroll
    for (int q = 0; q < 2; ++q)
      bias2[q] = args.bias != nullptr && col + q < n_left ? to_float(args.bias[n0 + col + q]) : 0.0f;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = wm0 + i * 16 + group + 8 * h;
        if (row >= m_left) continue;
        const int64_t at = static_cast<int64_t>(m0 + row) * args.ldc + (n0 + col);  // in C and gelu_out
#pragma unroll
        for (int q = 0; q < 2; ++q)
          if (col + q < n_left) store_epilogue(c, gelu_out, at + q, acc[i][j][2 * h + q] + bias2[q], args.act);
      }
  }
}

// ---- launchers ----

template <typename T>
bool chunks_allowed(const void* p, int64_t ld, int64_t stride) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % kChunk == 0 && stride % kChunk == 0;
}

template <class Cfg, Rung RUNG, bool TRANS_A, bool TRANS_B, typename T>
void launch_mma(MmaArgs<T> args, int64_t batch, cudaStream_t stream) {
  const int64_t tiles_m = ceil_div(args.m, Cfg::BM);
  const int64_t blocks = tiles_m * ceil_div(args.n, Cfg::BN);
  MINIDL_CHECK(blocks <= INT32_MAX, "mma_gemm: ", args.m, "x", args.n, " needs ", blocks, " thread blocks of ", Cfg::BM,
               "x", Cfg::BN, ", more than a grid holds");
  args.tiles_m = static_cast<int>(tiles_m);
  for (int64_t first = 0; first < batch; first += kMaxGridZ) {
    const int64_t count = std::min(batch - first, kMaxGridZ);
    MmaArgs<T> chunk = args;
    chunk.a += first * args.stride_a;
    chunk.b += first * args.stride_b;
    chunk.c += first * args.stride_c;
    const dim3 grid(static_cast<unsigned>(blocks), 1, static_cast<unsigned>(count));
    MINIDL_LAUNCH(mma_gemm_kernel<Cfg, T, TRANS_A, TRANS_B, RUNG>, grid, Cfg::THREADS, 0, stream, chunk);
  }
}

template <class Cfg, Rung RUNG, typename T>
void launch_for_transposes(const GemmProblem& p, const MmaArgs<T>& args, cudaStream_t stream) {
  if (p.trans_a) {
    if (p.trans_b) launch_mma<Cfg, RUNG, true, true>(args, p.batch, stream);
    else launch_mma<Cfg, RUNG, true, false>(args, p.batch, stream);
  } else {
    if (p.trans_b) launch_mma<Cfg, RUNG, false, true>(args, p.batch, stream);
    else launch_mma<Cfg, RUNG, false, false>(args, p.batch, stream);
  }
}

template <typename T>
void mma_gemm_typed(const GemmProblem& p, GemmKernel kernel, MmaTile tile, cudaStream_t stream) {
  MmaArgs<T> args;
  args.a = static_cast<const T*>(p.a);
  args.b = static_cast<const T*>(p.b);
  args.c = static_cast<T*>(p.c);
  args.bias = static_cast<const T*>(p.bias);
  args.lda = p.lda;
  args.ldb = p.ldb;
  args.ldc = p.ldc;
  args.m = static_cast<int>(p.m);
  args.n = static_cast<int>(p.n);
  args.k = static_cast<int>(p.k);
  args.stride_a = p.stride_a;
  args.stride_b = p.stride_b;
  args.stride_c = p.stride_c;
  args.gelu_out = static_cast<T*>(p.gelu_out);
  args.act = epilogue_act(p);
  args.vec_a = chunks_allowed<T>(p.a, p.lda, p.stride_a);
  args.vec_b = chunks_allowed<T>(p.b, p.ldb, p.stride_b);
  // The pipeline on either tile; the two teaching rungs on the large tile only.
  switch (kernel) {
    case GemmKernel::Mma: launch_for_transposes<MmaLarge, Rung::Mma>(p, args, stream); break;
    case GemmKernel::MmaLdmatrix: launch_for_transposes<MmaLarge, Rung::Ldmatrix>(p, args, stream); break;
    case GemmKernel::MmaPipeline:
      if (tile == MmaTile::Large128x128) launch_for_transposes<MmaLarge, Rung::Pipeline>(p, args, stream);
      else launch_for_transposes<MmaSmall, Rung::Pipeline>(p, args, stream);
      break;
    case GemmKernel::Simt: MINIDL_INTERNAL_ASSERT(false, "mma_gemm asked for the SIMT kernel");
  }
}

}  // namespace

void mma_gemm(const GemmProblem& p, GemmKernel kernel, MmaTile tile, cudaStream_t stream) {
  MINIDL_INTERNAL_ASSERT(p.m >= 1 && p.n >= 1 && p.k >= 1, "M, N, K = ", p.m, ", ", p.n, ", ", p.k);
  MINIDL_CHECK(p.dtype == DType::BFloat16 || p.dtype == DType::Float16, "mma_gemm: the tensor-core GEMM takes bfloat16 "
               "or float16 matrices, got ", p.dtype);
  MINIDL_CHECK(p.m <= kMaxGemmDim && p.n <= kMaxGemmDim && p.k <= kMaxGemmDim, "mma_gemm: M, N, K = ", p.m, ", ",
               p.n, ", ", p.k, " exceed the supported ", kMaxGemmDim, " per dimension");
  if (p.dtype == DType::BFloat16) mma_gemm_typed<__nv_bfloat16>(p, kernel, tile, stream);
  else mma_gemm_typed<__half>(p, kernel, tile, stream);
}

}  // namespace minidl::cuda
