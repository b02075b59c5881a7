// CPU GEMM: C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C, with a fused epilogue
// (+ bias[N], ReLU). One routine serves every transposed variant: op(A) and op(B) are given by
// row/column strides and the packing step reads them in any layout.
//
// Strategy (Goto/BLIS): for each K block of KC and M block of MC, pack A into MR-row strips
// ([KC][MR], 64-byte aligned) and B into NR-column strips ([KC][NR]); a register-tiled
// micro-kernel then computes each MR×NR tile of C with MR·NR/VL vector accumulators. The
// micro-kernel is written with GCC vector types, so the compiler emits AVX-512 (or AVX2) FMAs
// for float and double without intrinsics. OpenMP splits the NR strips of each block across
// threads (so even M = 128 uses every core). Tiny problems (the seed model's 10×10×5) take a
// direct loop: packing would cost more than the math.
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
template <typename T>
void pack_a(const GemmArgs<T>& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, T* dst) {
  constexpr int MR = Tile<T>::MR;
  const int64_t strips = (mc + MR - 1) / MR;
#pragma omp for schedule(static)
  for (int64_t s = 0; s < strips; ++s) {
    T* out = dst + s * kc * MR;
    const int64_t rows = std::min<int64_t>(MR, mc - s * MR);
    for (int64_t p = 0; p < kc; ++p) {
      const T* col = g.a + (i0 + s * MR) * g.rs_a + (p0 + p) * g.cs_a;
      int64_t r = 0;
      for (; r < rows; ++r) out[p * MR + r] = col[r * g.rs_a];
      for (; r < MR; ++r) out[p * MR + r] = T(0);
    }
  }
}

// Packs op(B)[p0:p0+kc, j0:j0+nc] into strips of NR columns: strip s holds [kc][NR], zero padded.
template <typename T>
void pack_b(const GemmArgs<T>& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
  constexpr int NR = Tile<T>::NR;
  const int64_t strips = (nc + NR - 1) / NR;
#pragma omp for schedule(static)
  for (int64_t s = 0; s < strips; ++s) {
    T* out = dst + s * kc * NR;
    const int64_t cols = std::min<int64_t>(NR, nc - s * NR);
    for (int64_t p = 0; p < kc; ++p) {
      const T* row = g.b + (p0 + p) * g.rs_b + (j0 + s * NR) * g.cs_b;
      int64_t c = 0;
      if (g.cs_b == 1) {
        std::memcpy(out + p * NR, row, static_cast<size_t>(cols) * sizeof(T));
        c = cols;
      }
      for (; c < cols; ++c) out[p * NR + c] = row[c * g.cs_b];
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
      const V ai = V{} + a[i];  // broadcast
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

// Writes one MR×NR accumulator tile into C (clipped to rows × cols) with the epilogue.
template <typename T>
void store_tile(const GemmArgs<T>& g, const T* acc, int64_t i0, int64_t j0, int64_t rows, int64_t cols, bool first_k,
                bool last_k) {
  constexpr int NR = Tile<T>::NR;
  for (int64_t r = 0; r < rows; ++r) {
    T* c = g.c + (i0 + r) * g.ldc + j0;
    const T* a = acc + r * NR;
    for (int64_t j = 0; j < cols; ++j) {
      T v = g.alpha * a[j];
      if (first_k) {
        if (g.beta != T(0)) v += g.beta * c[j];
        if (g.bias) v += g.bias[j0 + j];
      } else {
        v += c[j];
      }
      if (last_k && g.relu && v < T(0)) v = T(0);
      c[j] = v;
    }
  }
}

template <typename T>
void gemm_small(const GemmArgs<T>& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      T acc = 0;
      const T* a = g.a + i * g.rs_a;
      const T* b = g.b + j * g.cs_b;
      for (int64_t p = 0; p < g.k; ++p) acc += a[p * g.cs_a] * b[p * g.rs_b];
      T v = g.alpha * acc;
      T& c = g.c[i * g.ldc + j];
      if (g.beta != T(0)) v += g.beta * c;
      if (g.bias) v += g.bias[j];
      if (g.relu && v < T(0)) v = T(0);
      c = v;
    }
  }
}

template <typename T>
void gemm_blocked(const GemmArgs<T>& g) {
  using Tl = Tile<T>;
  constexpr int MR = Tl::MR, NR = Tl::NR;
  auto a_pack = aligned_buffer<T>(Tl::MC * Tl::KC);
  auto b_pack = aligned_buffer<T>(Tl::KC * (Tl::NC + NR));
  T* ap = a_pack.get();
  T* bp = b_pack.get();
  // The body's `omp for` loops also run orphaned (one thread) when no team is started:
  // mid-size problems skip the cost of starting one.
  auto body = [&] {
    alignas(64) T acc[MR * NR];
    for (int64_t j0 = 0; j0 < g.n; j0 += Tl::NC) {
      const int64_t nc = std::min(Tl::NC, g.n - j0);
      const int64_t n_strips = (nc + NR - 1) / NR;
      for (int64_t p0 = 0; p0 < g.k; p0 += Tl::KC) {
        const int64_t kc = std::min(Tl::KC, g.k - p0);
        const bool first_k = p0 == 0, last_k = p0 + kc >= g.k;
        pack_b(g, p0, kc, j0, nc, bp);  // implicit barrier at the end of the omp for
        for (int64_t i0 = 0; i0 < g.m; i0 += Tl::MC) {
          const int64_t mc = std::min(Tl::MC, g.m - i0);
          const int64_t m_strips = (mc + MR - 1) / MR;
          pack_a(g, i0, mc, p0, kc, ap);
#pragma omp for schedule(static) collapse(2)
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
  };
  if (g.m * g.n * g.k > (int64_t{1} << 18)) {
#pragma omp parallel
    body();
  } else {
    body();
  }
}

// K = 0: the product is empty, C = beta·C (+ bias, ReLU).
template <typename T>
void gemm_epilogue_only(const GemmArgs<T>& g) {
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

template <typename T>
void gemm(const GemmArgs<T>& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) return gemm_epilogue_only(g);
  if (g.m * g.n * g.k <= 32 * 32 * 32) return gemm_small(g);
  gemm_blocked(g);
}

template void gemm<float>(const GemmArgs<float>&);
template void gemm<double>(const GemmArgs<double>&);

}  // namespace minidl::cpu
