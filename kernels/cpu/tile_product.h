// Register-tiled products of small blocks already in cache: C[m, n] = A[m, k]·B[k, n], or
// C += A·B. Built for the CPU attention's FlashAttention tiles (kernels/cpu/attention.cpp:
// 32 queries × 64 keys × a head size of 64, say), which are too small to pay for the GEMM's
// packing and whose operands are read once per tile.
//
// Layouts: element (r, p) of A is a[r·a_row + p·a_col] — any strides, so a tile can be used
// as Aᵀ without a copy (A's elements are broadcast one at a time, from wherever they are);
// row p of B starts at b + p·b_row and is contiguous along n; row r of C starts at c + r·c_row
// and is contiguous along n.
//
// Strategy: C is cut into strips of two vectors' width (2·VL columns: 32 floats with AVX-512)
// and each strip into kTileRows rows (kernels/cpu/simd.h), one register tile each. A tile keeps
// its 2·kTileRows accumulators in registers across all k: per step it loads two vectors of B's
// row p and broadcasts one element of A per row, rows × 2 FMAs for 2 loads + rows broadcasts.
// The row axpys this replaces (y += a·x along a row) loaded and stored their accumulator row
// through L1 for every single FMA. Columns past the last whole strip take a one-vector strip,
// then one partial vector for the last n mod VL.
//
// Each element of C is one chain of vector multiply-adds over p = 0, 1, …, k − 1 (onto 0, or
// onto C's value; fused when the target has FMA: MINIDL_NATIVE_FLAGS in CMakeLists.txt stops
// GCC's Zen 1-3 tuning from leaving some unfused), whichever tile, strip or partial vector
// computes it: the result does not depend on where the element sits, so a tile product
// repeated on the same operands (attention's forward and its recomputation in backward) gives
// the same bits. (A scalar loop for the last columns would not: GCC contracted it differently.)
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd.h"

namespace minidl::cpu {
inline namespace MINIDL_CPU_ISA {  // kernels/cpu/simd.h

namespace tile_detail {

// C[R, NV·VL] (+)= A[R, k]·B[k, NV·VL] for NV = 1 or 2 vectors per row, in registers. With
// kPartial (NV = 1), only the first `cols` < VL columns: B's and C's rows are read into
// zero-filled vectors and only those columns are written back, so that the last columns take
// the same vector arithmetic as the others.
template <typename T, int R, int NV, bool kAccumulate, bool kPartial = false>
inline void register_tile(int64_t k, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row, T* c,
                          int64_t c_row, int64_t cols = 0) {
  using V = typename Vector<T>::type;
  constexpr int VL = kLanes<T>;
  static_assert(!kPartial || NV == 1);
  const size_t bytes = kPartial ? static_cast<size_t>(cols) * sizeof(T) : sizeof(V);
  V c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    c0[r] = c1[r] = V{};
    if constexpr (kAccumulate) {
      std::memcpy(&c0[r], c + r * c_row, bytes);
      if constexpr (NV == 2) std::memcpy(&c1[r], c + r * c_row + VL, sizeof(V));
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    V b0{}, b1;
    std::memcpy(&b0, b + p * b_row, bytes);
    if constexpr (NV == 2) std::memcpy(&b1, b + p * b_row + VL, sizeof(V));
    const T* ap = a + p * a_col;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const T ar = ap[r * a_row];  // scalar × vector: a broadcast from memory
      c0[r] += ar * b0;
      if constexpr (NV == 2) c1[r] += ar * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    std::memcpy(c + r * c_row, &c0[r], bytes);
    if constexpr (NV == 2) std::memcpy(c + r * c_row + VL, &c1[r], sizeof(V));
  }
}

// The last `rows` (< kTileRows) rows of a strip: a register tile of exactly that many rows.
template <typename T, int NV, bool kAccumulate, bool kPartial, int R = kTileRows - 1>
void remaining_rows(int64_t rows, int64_t k, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row,
                    T* c, int64_t c_row, int64_t cols) {
  if constexpr (R > 0) {
    if (rows == R) return register_tile<T, R, NV, kAccumulate, kPartial>(k, a, a_row, a_col, b, b_row, c, c_row, cols);
    remaining_rows<T, NV, kAccumulate, kPartial, R - 1>(rows, k, a, a_row, a_col, b, b_row, c, c_row, cols);
  }
}

// One strip of NV vectors' width (or, kPartial, of `cols` columns) over all m rows: whole tiles
// of kTileRows, then the rest.
template <typename T, int NV, bool kAccumulate, bool kPartial = false>
void strip(int64_t m, int64_t k, const T* a, int64_t a_row, int64_t a_col, const T* b, int64_t b_row, T* c,
           int64_t c_row, int64_t cols = 0) {
  constexpr int MR = kTileRows;
  int64_t r0 = 0;
  for (; r0 + MR <= m; r0 += MR)
    register_tile<T, MR, NV, kAccumulate, kPartial>(k, a + r0 * a_row, a_row, a_col, b, b_row, c + r0 * c_row, c_row,
                                                    cols);
  remaining_rows<T, NV, kAccumulate, kPartial>(m - r0, k, a + r0 * a_row, a_row, a_col, b, b_row, c + r0 * c_row,
                                               c_row, cols);
}

}  // namespace tile_detail

// C[m, n] = A[m, k]·B[k, n] (kAccumulate false) or C[m, n] += A·B (true); layouts above.
// k = 0 leaves C as it is (+=) or sets it to 0 (=).
template <typename T, bool kAccumulate>
void tile_product(int64_t m, int64_t n, int64_t k, const T* a, int64_t a_row, int64_t a_col, const T* b,
                  int64_t b_row, T* c, int64_t c_row) {
  constexpr int VL = kLanes<T>;
  int64_t j = 0;
  for (; j + 2 * VL <= n; j += 2 * VL)
    tile_detail::strip<T, 2, kAccumulate>(m, k, a, a_row, a_col, b + j, b_row, c + j, c_row);
  if (j + VL <= n) {
    tile_detail::strip<T, 1, kAccumulate>(m, k, a, a_row, a_col, b + j, b_row, c + j, c_row);
    j += VL;
  }
  if (j < n)  // the last n mod VL columns
    tile_detail::strip<T, 1, kAccumulate, true>(m, k, a, a_row, a_col, b + j, b_row, c + j, c_row, n - j);
}

}  // namespace MINIDL_CPU_ISA
}  // namespace minidl::cpu
