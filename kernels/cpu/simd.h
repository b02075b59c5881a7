// The CPU kernels' vector width, as GCC vector types: the GEMM's micro-kernel (gemm.cpp) and
// the attention's tile products (tile_product.h) are written with them instead of intrinsics,
// so the compiler emits AVX-512 or AVX2 FMAs for float and double from the same source, with
// whatever -march the build chose.
//
// A register tile is kTileRows rows × two vectors: 2·kTileRows accumulators plus the two
// vectors of B a step loads, sized to the register file (32 zmm registers with AVX-512: 16
// accumulators; 16 ymm with AVX2: 12).
#pragma once

namespace minidl::cpu {

#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
inline constexpr int kTileRows = 8;
#else
inline constexpr int kVectorBytes = 32;
inline constexpr int kTileRows = 6;
#endif

// The attribute cannot apply to a dependent type, hence the specialisations.
template <typename T>
struct Vector;
template <>
struct Vector<float> {
  typedef float type __attribute__((vector_size(kVectorBytes)));
};
template <>
struct Vector<double> {
  typedef double type __attribute__((vector_size(kVectorBytes)));
};

// Lanes of T in one vector.
template <typename T>
inline constexpr int kLanes = kVectorBytes / static_cast<int>(sizeof(T));

}  // namespace minidl::cpu
