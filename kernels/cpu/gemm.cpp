// CPU GEMM: C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C, with a fused epilogue
// (+ bias[N], ReLU). One routine serves every transposed variant: op(A) and op(B) are given by
// row/column strides and the packing step reads them in any layout.
//
// Strategy (Goto/BLIS): for each K block of KC and M block of MC, pack A into MR-row strips
// ([KC][MR], 64-byte aligned) and B into NR-column strips ([KC][NR]); a register-tiled
// micro-kernel then computes each MR×NR tile of C with MR·NR/VL vector accumulators. The
// micro-kernel is written with GCC vector types, so the compiler emits AVX-512 (or AVX2) FMAs
// for float and double without intrinsics. Tiny problems (the seed model's 10×10×5) take a
// direct loop: packing would cost more than the math.
//
// Threads: C is cut into one block of whole NR-column strips per thread (or of MR-row strips
// when that leaves the busiest thread less to compute and pack), and each thread of the
// ThreadPool runs the serial algorithm on its block with its own packing buffers. The only
// synchronisation is the end of the run: no barrier per K block, which matters for the MLP's
// small GEMMs (M = 64) and on a loaded machine, where a barrier waits for whichever thread the
// OS has descheduled. Every element of C sees the same sequence of K blocks and micro-kernel
// sums whatever the split, so the result does not depend on the thread count.
//
// bfloat16 operands on a CPU with AVX512_BF16 take their own packing and micro-kernel
// (Note [the bf16 dot-product micro-kernel]); every other 16-bit product widens its operands to
// float while it packs them and runs the float micro-kernel.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/tile_product.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

// MINIDL_GEMM_NAMESPACE: tests/kernels/gemm_avx2.cpp includes this file to compile it a second
// time, for AVX2 without AVX-512, into minidl::cpu::MINIDL_GEMM_NAMESPACE, so that the path for
// CPUs without AVX-512 is tested on every machine that runs the tests.
#if defined(MINIDL_GEMM_NAMESPACE)
namespace minidl::cpu::MINIDL_GEMM_NAMESPACE {
#else
namespace minidl::cpu {
#endif

namespace {

template <typename T>
struct Tile {
  static constexpr int VL = kLanes<T>;  // lanes per vector (kernels/cpu/simd.h)
  static constexpr int MR = kTileRows;
  static constexpr int NR = 2 * VL;  // two vectors per row of the tile
  static constexpr int64_t KC = 512;
  static constexpr int64_t MC = MR * 24;
  static constexpr int64_t NC = NR * 64;
};

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
std::unique_ptr<T, AlignedFree> aligned_buffer(int64_t count) {
  const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
  return std::unique_ptr<T, AlignedFree>(static_cast<T*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes)));
}

// Packs op(A)[i0:i0+mc, p0:p0+kc] into strips of MR rows: strip s holds [kc][MR], zero padded.
template <typename T, typename In>
void pack_a(const GemmArgs<T, In>& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T* dst) {
  constexpr int MR = Tile<T>::MR;
  const int64_t strips = (mc + MR - 1) / MR;
  for (int64_t s = 0; s < strips; ++s) {
    T* out = dst + s * kc * MR;
    const int64_t rows = std::min<int64_t>(MR, mc - s * MR);
    for (int64_t p = 0; p < kc; ++p) {
      const In* col = g.a + (i0 + s * MR) * g.rs_a + (p0 + p) * g.cs_a;
      int64_t r = 0;
      for (; r < rows; ++r) out[p * MR + r] = static_cast<T>(col[r * g.rs_a]);
      for (; r < MR; ++r) out[p * MR + r] = T(0);
    }
  }
}

// Packs op(B)[p0:p0+kc, j0:j0+nc] into strips of NR columns: strip s holds [kc][NR], zero padded.
template <typename T, typename In>
void pack_b(const GemmArgs<T, In>& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
  constexpr int NR = Tile<T>::NR;
  const int64_t strips = (nc + NR - 1) / NR;
  for (int64_t s = 0; s < strips; ++s) {
    T* out = dst + s * kc * NR;
    const int64_t cols = std::min<int64_t>(NR, nc - s * NR);
    for (int64_t p = 0; p < kc; ++p) {
      const In* row = g.b + (p0 + p) * g.rs_b + (j0 + s * NR) * g.cs_b;
      int64_t c = 0;
      if constexpr (std::is_same_v<T, In>) {
        if (g.cs_b == 1) {
          std::memcpy(out + p * NR, row, static_cast<size_t>(cols) * sizeof(T));
          c = cols;
        }
      }
      for (; c < cols; ++c) out[p * NR + c] = static_cast<T>(row[c * g.cs_b]);
      for (; c < NR; ++c) out[p * NR + c] = T(0);
    }
  }
}

// acc[MR][NR] = Σ_p a[p][:] ⊗ b[p][:] over kc steps: MR×2 vector accumulators in registers.
// kNarrow: only the first vector's columns (a strip of at most VL columns, the rest zero
// padding: N = 10 or the last 9 of N = 73), half the FMAs; each element is the same chain of
// multiply-adds either way, so the same bits.
template <typename T, bool kNarrow = false>
void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict acc) {
  using V = typename Vector<T>::type;
  constexpr int MR = Tile<T>::MR, VL = Tile<T>::VL;
  V c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    const V b0 = *reinterpret_cast<const V*>(b);  // packed strips are 64-byte aligned
    V b1{};
    if constexpr (!kNarrow) b1 = *reinterpret_cast<const V*>(b + VL);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      // scalar × vector: GCC broadcasts a[i] straight from memory. (Writing V{} + a[i] costs
      // a real scalar add per row, as 0 + -0 is not -0, and takes the FMA ports' slots.)
      const T ai = a[i];
      c0[i] += ai * b0;
      if constexpr (!kNarrow) c1[i] += ai * b1;
    }
    a += MR;
    b += 2 * VL;
  }
  for (int i = 0; i < MR; ++i) {
    std::memcpy(acc + i * 2 * VL, &c0[i], sizeof(V));
    if constexpr (!kNarrow) std::memcpy(acc + i * 2 * VL + VL, &c1[i], sizeof(V));
  }
}

// Writes one MR×NR accumulator tile into C (clipped to rows × cols) with the epilogue. The
// branches are hoisted out of the column loops so that each loop is one vector pass; the
// arithmetic per element is still alpha·acc (+ beta·C + bias on the first K block, + C after).
template <typename T, typename In>
void store_tile(const GemmArgs<T, In>& g, const T* acc, int64_t i0, int64_t j0, int64_t rows, int64_t cols, bool first_k,
                bool last_k) {
  constexpr int NR = Tile<T>::NR;
  const T alpha = g.alpha, beta = g.beta;
  const T* bias = g.bias ? g.bias + j0 : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    T* __restrict c = g.c + (i0 + r) * g.ldc + j0;
    const T* __restrict a = acc + r * NR;
    if (!first_k) {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * a[j] + c[j];
    } else if (beta != T(0)) {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * a[j] + beta * c[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * a[j];
    }
    if (first_k && bias)
      for (int64_t j = 0; j < cols; ++j) c[j] += bias[j];
    if (last_k && g.relu)
      for (int64_t j = 0; j < cols; ++j) c[j] = c[j] < T(0) ? T(0) : c[j];
  }
}

template <typename T, typename In>
void gemm_small(const GemmArgs<T, In>& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      T acc = 0;
      const In* a = g.a + i * g.rs_a;
      const In* b = g.b + j * g.cs_b;
      for (int64_t p = 0; p < g.k; ++p) {
#if defined(__FMA__)
        // Fused, as the micro-kernel's steps are, and spelled out: left to contraction, GCC fused
        // this loop in one build and not in another (AVX-512 against AVX2), and the two
        // disagreed in the last bit.
        acc = std::fma(static_cast<T>(a[p * g.cs_a]), static_cast<T>(b[p * g.rs_b]), acc);
#else
        acc += static_cast<T>(a[p * g.cs_a]) * static_cast<T>(b[p * g.rs_b]);
#endif
      }
      T v = g.alpha * acc;
      T& c = g.c[i * g.ldc + j];
      if (g.beta != T(0)) v += g.beta * c;
      if (g.bias) v += g.bias[j];
      if (g.relu && v < T(0)) v = T(0);
      c = v;
    }
  }
}

// This thread's packing buffers, kept between calls (each is a few hundred KiB to 4 MiB).
template <typename T>
struct PackBuffers {
  std::unique_ptr<T, AlignedFree> a = aligned_buffer<T>(Tile<T>::MC * Tile<T>::KC);
  std::unique_ptr<T, AlignedFree> b = aligned_buffer<T>(Tile<T>::KC * (Tile<T>::NC + Tile<T>::NR));
};

template <typename T>
PackBuffers<T>& pack_buffers() {
  thread_local PackBuffers<T> buffers;
  return buffers;
}

// The serial blocked algorithm over all of `g` (one thread's block of C).
template <typename T, typename In>
void gemm_serial(const GemmArgs<T, In>& g) {
  using Tl = Tile<T>;
  constexpr int MR = Tl::MR, NR = Tl::NR;
  PackBuffers<T>& buffers = pack_buffers<T>();
  T* ap = buffers.a.get();
  T* bp = buffers.b.get();
  alignas(64) T acc[MR * NR];
  for (int64_t j0 = 0; j0 < g.n; j0 += Tl::NC) {
    const int64_t nc = std::min(Tl::NC, g.n - j0);
    const int64_t n_strips = (nc + NR - 1) / NR;
    for (int64_t p0 = 0; p0 < g.k; p0 += Tl::KC) {
      const int64_t kc = std::min(Tl::KC, g.k - p0);
      const bool first_k = p0 == 0, last_k = p0 + kc >= g.k;
      pack_b(g, p0, kc, j0, nc, bp);  // [kc, nc] as n_strips strips of [kc][NR]
      for (int64_t i0 = 0; i0 < g.m; i0 += Tl::MC) {
        const int64_t mc = std::min(Tl::MC, g.m - i0);
        const int64_t m_strips = (mc + MR - 1) / MR;
        pack_a(g, i0, mc, p0, kc, ap);  // [mc, kc] as m_strips strips of [kc][MR]
        for (int64_t sj = 0; sj < n_strips; ++sj) {
          const int64_t cols = std::min<int64_t>(NR, nc - sj * NR);
          for (int64_t si = 0; si < m_strips; ++si) {
            if (cols <= Tl::VL)
              micro_kernel<T, true>(kc, ap + si * kc * MR, bp + sj * kc * NR, acc);
            else
              micro_kernel<T>(kc, ap + si * kc * MR, bp + sj * kc * NR, acc);
            store_tile(g, acc, i0 + si * MR, j0 + sj * NR, std::min<int64_t>(MR, mc - si * MR), cols, first_k,
                       last_k);
          }
        }
      }
    }
  }
}

#if defined(__AVX512BF16__)
// Note [the bf16 dot-product micro-kernel]
// vdpbf16ps (_mm512_dpbf16_ps) takes two vectors of 32 bfloat16 and a vector of 16 float
// accumulators, and adds to accumulator i the products of pair i: acc[i] += x[2i]·y[2i] +
// x[2i+1]·y[2i+1], each product exact in float32 (8-bit significands) and each sum rounded to
// float32 (to nearest even; the instruction treats subnormal inputs and results as zero). One
// instruction is 32 multiply-adds where a float FMA is 16, and the operands are half as wide.
// The packing pairs consecutive k so that the pair sits in one 32-bit lane:
//   A strip [kc/2][MR][2]: the (k, k+1) values of row r side by side; broadcast as one int32
//   B strip [kc/2][NR][2]: the (k, k+1) values of column c side by side; one 64-byte vector is
//                          the pairs of 16 columns, two vectors cover the NR = 32
// An odd kc pads its last pair with a zero. The tile is the float kernel's (MR rows, NR = 32
// columns, 2·MR accumulators), so the blocking, the thread split and the epilogue (store_tile)
// are shared with it. The sum over k runs in pairs rather than one term at a time, so the
// result is not the float GEMM's bit for bit — both are float32 accumulations of the same
// exact products, within K·2^-24·Σ|a·b| of the exact sum (tests/kernels/test_half_kernels.cpp
// holds it to that) — and, as in the float kernel, the order does not depend on the threads.
using Bf16Tile = Tile<float>;
static_assert(Bf16Tile::NR == 32, "the bf16 micro-kernel computes 32 columns: two vectors of 16 floats");

// Packs op(A)[i0:i0+mc, p0:p0+kc] into strips of MR rows, [ceil(kc/2)][MR][2] each.
void pack_a_pairs(const GemmArgs<float, bfloat16>& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, uint16_t* dst) {
  constexpr int MR = Bf16Tile::MR;
  const int64_t strips = (mc + MR - 1) / MR, pairs = (kc + 1) / 2;
  for (int64_t s = 0; s < strips; ++s) {
    uint16_t* out = dst + s * pairs * MR * 2;
    const int64_t rows = std::min<int64_t>(MR, mc - s * MR);
    for (int64_t q = 0; q < pairs; ++q) {
      const bfloat16* col = g.a + (i0 + s * MR) * g.rs_a + (p0 + 2 * q) * g.cs_a;
      const bool odd_tail = 2 * q + 1 == kc;  // the last pair has no second k
      int64_t r = 0;
      for (; r < rows; ++r) {
        out[(q * MR + r) * 2] = col[r * g.rs_a].bits();
        out[(q * MR + r) * 2 + 1] = odd_tail ? 0 : col[r * g.rs_a + g.cs_a].bits();
      }
      for (; r < MR; ++r) out[(q * MR + r) * 2] = out[(q * MR + r) * 2 + 1] = 0;
    }
  }
}

// Packs op(B)[p0:p0+kc, j0:j0+nc] into strips of NR columns, [ceil(kc/2)][NR][2] each.
void pack_b_pairs(const GemmArgs<float, bfloat16>& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, uint16_t* dst) {
  constexpr int NR = Bf16Tile::NR;
  const int64_t strips = (nc + NR - 1) / NR, pairs = (kc + 1) / 2;
  for (int64_t s = 0; s < strips; ++s) {
    uint16_t* out = dst + s * pairs * NR * 2;
    const int64_t cols = std::min<int64_t>(NR, nc - s * NR);
    for (int64_t q = 0; q < pairs; ++q) {
      const bfloat16* row0 = g.b + (p0 + 2 * q) * g.rs_b + (j0 + s * NR) * g.cs_b;
      const bool odd_tail = 2 * q + 1 == kc;
      int64_t c = 0;
      for (; c < cols; ++c) {
        out[(q * NR + c) * 2] = row0[c * g.cs_b].bits();
        out[(q * NR + c) * 2 + 1] = odd_tail ? 0 : row0[c * g.cs_b + g.rs_b].bits();
      }
      for (; c < NR; ++c) out[(q * NR + c) * 2] = out[(q * NR + c) * 2 + 1] = 0;
    }
  }
}

// acc[MR][NR] = Σ over `pairs` k pairs of a's pair (broadcast) · b's pairs, as dot products.
void micro_kernel_bf16(int64_t pairs, const uint16_t* __restrict a, const uint16_t* __restrict b, float* __restrict acc) {
  constexpr int MR = Bf16Tile::MR;
  __m512 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b);       // columns 0-15, their k pairs
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + 32);  // columns 16-31
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + 2 * i, sizeof pair);
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(pair);
      c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
    }
    a += 2 * MR;
    b += 2 * Bf16Tile::NR;
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_store_ps(acc + i * Bf16Tile::NR, c0[i]);
    _mm512_store_ps(acc + i * Bf16Tile::NR + 16, c1[i]);
  }
}

struct PairBuffers {
  std::unique_ptr<uint16_t, AlignedFree> a = aligned_buffer<uint16_t>(Bf16Tile::MC * (Bf16Tile::KC + 1));
  std::unique_ptr<uint16_t, AlignedFree> b = aligned_buffer<uint16_t>((Bf16Tile::KC + 1) * (Bf16Tile::NC + Bf16Tile::NR));
};

// gemm_serial for bfloat16 operands through the dot-product micro-kernel: the same loops.
void gemm_serial_bf16(const GemmArgs<float, bfloat16>& g) {
  constexpr int MR = Bf16Tile::MR, NR = Bf16Tile::NR;
  thread_local PairBuffers buffers;
  uint16_t* ap = buffers.a.get();
  uint16_t* bp = buffers.b.get();
  alignas(64) float acc[MR * NR];
  for (int64_t j0 = 0; j0 < g.n; j0 += Bf16Tile::NC) {
    const int64_t nc = std::min(Bf16Tile::NC, g.n - j0);
    const int64_t n_strips = (nc + NR - 1) / NR;
    for (int64_t p0 = 0; p0 < g.k; p0 += Bf16Tile::KC) {
      const int64_t kc = std::min(Bf16Tile::KC, g.k - p0), pairs = (kc + 1) / 2;
      const bool first_k = p0 == 0, last_k = p0 + kc >= g.k;
      pack_b_pairs(g, p0, kc, j0, nc, bp);
      for (int64_t i0 = 0; i0 < g.m; i0 += Bf16Tile::MC) {
        const int64_t mc = std::min(Bf16Tile::MC, g.m - i0);
        const int64_t m_strips = (mc + MR - 1) / MR;
        pack_a_pairs(g, i0, mc, p0, kc, ap);
        for (int64_t sj = 0; sj < n_strips; ++sj) {
          for (int64_t si = 0; si < m_strips; ++si) {
            micro_kernel_bf16(pairs, ap + si * pairs * MR * 2, bp + sj * pairs * NR * 2, acc);
            store_tile(g, acc, i0 + si * MR, j0 + sj * NR, std::min<int64_t>(MR, mc - si * MR),
                       std::min<int64_t>(NR, nc - sj * NR), first_k, last_k);
          }
        }
      }
    }
  }
}
#endif

// One thread's block of C: the bf16 dot-product kernel where the CPU has it, else the float one.
template <typename T, typename In>
void gemm_block(const GemmArgs<T, In>& g) {
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<In, bfloat16>) return gemm_serial_bf16(g);
#endif
  gemm_serial(g);
}

// Block `part` of `parts` of C: whole NR-column strips when there are enough of them, else
// whole MR-row strips; the strips are dealt out as evenly as they go.
template <typename T, typename In>
GemmArgs<T, In> block_of(const GemmArgs<T, In>& g, int part, int parts, bool split_columns) {
  constexpr int MR = Tile<T>::MR, NR = Tile<T>::NR;
  const int64_t unit = split_columns ? NR : MR, extent = split_columns ? g.n : g.m;
  const int64_t strips = (extent + unit - 1) / unit;
  const int64_t begin = std::min(extent, strips * part / parts * unit);
  const int64_t end = std::min(extent, strips * (part + 1) / parts * unit);
  GemmArgs<T, In> sub = g;
  if (split_columns) {
    sub.n = end - begin;
    sub.b = g.b + begin * g.cs_b;
    sub.c = g.c + begin;
    if (g.bias) sub.bias = g.bias + begin;
  } else {
    sub.m = end - begin;
    sub.a = g.a + begin * g.rs_a;
    sub.c = g.c + begin * g.ldc;
  }
  return sub;
}

template <typename T, typename In>
void gemm_blocked(const GemmArgs<T, In>& g) {
  constexpr int MR = Tile<T>::MR, NR = Tile<T>::NR;
  // Mid-size problems stay on the calling thread: a thread team would cost more than it saves.
  ThreadPool& pool = ThreadPool::instance();
  const int threads = g.m * g.n * g.k > (int64_t{1} << 18) ? pool.max_threads() : 1;
  const int64_t col_strips = (g.n + NR - 1) / NR, row_strips = (g.m + MR - 1) / MR;
  // Cut along whichever dimension leaves the busiest thread less to do: its share of the tiles
  // (a ragged last strip costs a whole one), in vector FMAs, plus what it packs, at about one
  // element a cycle: cutting columns, each thread packs all of A and its part of B; cutting
  // rows, its part of A and all of B. The lm_head's N = 73 is 3 column strips, which 2 threads
  // would share 2 : 1, against 256 row strips shared evenly: rows. A convolution's weight
  // gradient (64 × 288, K = 12544) would cut rows for the tiles' sake but then pack its large B
  // twice: columns. Ties go to columns.
  const auto busiest = [&](int64_t strips) { return static_cast<double>((strips + threads - 1) / threads); };
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  const double lanes = Tile<T>::VL, t = threads;
  const double padded_m = static_cast<double>(row_strips * MR), padded_n = static_cast<double>(col_strips * NR);
  const double by_columns = busiest(col_strips) * NR * padded_m * k / lanes + m * k + k * n / t;
  const double by_rows = busiest(row_strips) * MR * padded_n * k / lanes + m * k / t + k * n;
  const bool split_columns = by_columns <= by_rows;
  const int parts = static_cast<int>(std::min<int64_t>(threads, split_columns ? col_strips : row_strips));
  if (parts <= 1) return gemm_block(g);
  pool.run(parts, [&](int part, int count) {
    const GemmArgs<T, In> sub = block_of(g, part, count, split_columns);
    if (sub.m > 0 && sub.n > 0) gemm_block(sub);
  });
}

// Note [a narrow C]: with N at most one strip wide (the MLP's last layer, N = 10), the blocked
// path packs all of A to compute one strip whose columns are mostly padding, and the packing
// costs as much as the product. This path packs nothing but B, into k rows of one zero-padded
// vector when N fits one (k × 16 floats with AVX-512) or else of the strip's two (k × 16 floats
// with AVX2, whose vector holds 8), and runs tile_product (kernels/cpu/tile_product.h: a
// register tile of kTileRows × that width, A broadcast straight from where it lies) into an
// accumulator block of MC rows, which store_tile writes out with the epilogue. Each element is
// one chain of multiply-adds over k onto 0, then alpha·acc (+ beta·C, bias, ReLU): for k ≤ KC
// exactly the blocked path's arithmetic, so the same bits. Only float and double (16-bit
// operands are widened while packed, which this path skips), only K within one K block, and
// only problems small enough for one thread (gemm_blocked's cut-off).
template <typename T, typename In>
bool gemm_narrow(const GemmArgs<T, In>& g) {
  using Tl = Tile<T>;
  if constexpr (!std::is_same_v<T, In>) {
    return false;
  } else {
    if (g.n > Tl::NR || g.k > Tl::KC || g.m * g.n * g.k > (int64_t{1} << 18)) return false;
    const int64_t width = g.n <= Tl::VL ? Tl::VL : Tl::NR;
    PackBuffers<T>& buffers = pack_buffers<T>();
    T* bp = buffers.b.get();  // [k][width]
    T* acc = buffers.a.get();  // [MC][NR], the row stride store_tile reads
    for (int64_t p = 0; p < g.k; ++p) {
      int64_t j = 0;
      for (; j < g.n; ++j) bp[p * width + j] = g.b[p * g.rs_b + j * g.cs_b];
      for (; j < width; ++j) bp[p * width + j] = T(0);
    }
    for (int64_t i0 = 0; i0 < g.m; i0 += Tl::MC) {
      const int64_t rows = std::min(Tl::MC, g.m - i0);
      tile_product<T, false>(rows, width, g.k, g.a + i0 * g.rs_a, g.rs_a, g.cs_a, bp, width, acc, Tl::NR);
      store_tile(g, acc, i0, 0, rows, g.n, true, true);
    }
    return true;
  }
}

// K = 0: the product is empty, C = beta·C (+ bias, ReLU).
template <typename T, typename In>
void gemm_epilogue_only(const GemmArgs<T, In>& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      T& c = g.c[i * g.ldc + j];
      T v = g.beta != T(0) ? g.beta * c : T(0);
      if (g.bias) v += g.bias[j];
      if (g.relu && v < T(0)) v = T(0);
      c = v;
    }
}

}  // namespace

template <typename T, typename In>
void gemm(const GemmArgs<T, In>& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) return gemm_epilogue_only(g);
  if (g.m * g.n * g.k <= 32 * 32 * 32) return gemm_small(g);
  if (gemm_narrow(g)) return;  // Note [a narrow C]
  gemm_blocked(g);
}

template void gemm<float, float>(const GemmArgs<float, float>&);
template void gemm<double, double>(const GemmArgs<double, double>&);
template void gemm<float, bfloat16>(const GemmArgs<float, bfloat16>&);
template void gemm<float, float16>(const GemmArgs<float, float16>&);

}  // namespace minidl::cpu (or minidl::cpu::MINIDL_GEMM_NAMESPACE)
