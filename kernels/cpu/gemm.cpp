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
// when N has too few strips), and each thread of the ThreadPool runs the serial algorithm on
// its block with its own packing buffers. The only synchronisation is the end of the run: no
// barrier per K block, which matters for the MLP's small GEMMs (M = 64) and on a loaded
// machine, where a barrier waits for whichever thread the OS has descheduled. Every element of
// C sees the same sequence of K blocks and micro-kernel sums whatever the split, so the result
// does not depend on the thread count.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace minidl::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
constexpr int kMR = 8;
#else
constexpr int kVectorBytes = 32;
constexpr int kMR = 6;
#endif

template <typename T>
struct Tile {
  static constexpr int VL = kVectorBytes / static_cast<int>(sizeof(T));  // lanes per vector
  static constexpr int MR = kMR;
  static constexpr int NR = 2 * VL;  // two vectors per row of the tile
  static constexpr int64_t KC = 256;
  static constexpr int64_t MC = MR * 24;
  static constexpr int64_t NC = NR * 64;
};

// GCC vector types (the attribute cannot apply to a dependent type, hence the specialisations).
template <typename T> struct Vector;
template <> struct Vector<float> { typedef float type __attribute__((vector_size(kVectorBytes))); };
template <> struct Vector<double> { typedef double type __attribute__((vector_size(kVectorBytes))); };

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
template <typename T>
void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict acc) {
  using V = typename Vector<T>::type;
  constexpr int MR = Tile<T>::MR, VL = Tile<T>::VL;
  V c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = V{};
  for (int64_t p = 0; p < kc; ++p) {
    const V b0 = *reinterpret_cast<const V*>(b);       // packed strips are 64-byte aligned
    const V b1 = *reinterpret_cast<const V*>(b + VL);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      // scalar × vector: GCC broadcasts a[i] straight from memory. (Writing V{} + a[i] costs
      // a real scalar add per row, as 0 + -0 is not -0, and takes the FMA ports' slots.)
      const T ai = a[i];
      c0[i] += ai * b0;
      c1[i] += ai * b1;
    }
    a += MR;
    b += 2 * VL;
  }
  for (int i = 0; i < MR; ++i) {
    std::memcpy(acc + i * 2 * VL, &c0[i], sizeof(V));
    std::memcpy(acc + i * 2 * VL + VL, &c1[i], sizeof(V));
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
      for (int64_t p = 0; p < g.k; ++p) acc += static_cast<T>(a[p * g.cs_a]) * static_cast<T>(b[p * g.rs_b]);
      T v = g.alpha * acc;
      T& c = g.c[i * g.ldc + j];
      if (g.beta != T(0)) v += g.beta * c;
      if (g.bias) v += g.bias[j];
      if (g.relu && v < T(0)) v = T(0);
      c = v;
    }
  }
}

// This thread's packing buffers, kept between calls (each is a few hundred KiB to 2 MiB).
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
          for (int64_t si = 0; si < m_strips; ++si) {
            micro_kernel<T>(kc, ap + si * kc * MR, bp + sj * kc * NR, acc);
            store_tile(g, acc, i0 + si * MR, j0 + sj * NR, std::min<int64_t>(MR, mc - si * MR),
                       std::min<int64_t>(NR, nc - sj * NR), first_k, last_k);
          }
        }
      }
    }
  }
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
  const bool split_columns = col_strips >= threads || col_strips >= row_strips;
  const int parts = static_cast<int>(std::min<int64_t>(threads, split_columns ? col_strips : row_strips));
  if (parts <= 1) return gemm_serial(g);
  pool.run(parts, [&](int part, int count) {
    const GemmArgs<T, In> sub = block_of(g, part, count, split_columns);
    if (sub.m > 0 && sub.n > 0) gemm_serial(sub);
  });
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
  gemm_blocked(g);
}

template void gemm<float, float>(const GemmArgs<float, float>&);
template void gemm<double, double>(const GemmArgs<double, double>&);
template void gemm<float, bfloat16>(const GemmArgs<float, bfloat16>&);
template void gemm<float, float16>(const GemmArgs<float, float16>&);

}  // namespace minidl::cpu
