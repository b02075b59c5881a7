// The CPU kernels' vector width, as GCC vector types: the GEMM's micro-kernel (gemm.cpp) and
// the attention's tile products (tile_product.h) are written with them instead of intrinsics,
// so the compiler emits AVX-512 or AVX2 FMAs for float and double from the same source, with
// whatever -march the build chose.
//
// A register tile is kTileRows rows × two vectors: 2·kTileRows accumulators plus the two
// vectors of B a step loads, sized to the register file (32 zmm registers with AVX-512: 16
// accumulators; 16 ymm with AVX2: 12).
//
// Everything here and in the headers built on it lives in an inline namespace named after the
// instruction set the file is compiled for (MINIDL_CPU_ISA). One program may hold the same code
// compiled for two of them: the tests compile the GEMM again for AVX2 (tests/kernels/
// gemm_avx2.cpp, which names its copy isa_avx2_test, distinct from an AVX2 machine's own
// isa_avx2) and tile_product.h without -march=native. Without the inline namespace those would
// be two different definitions of one template, and the linker would keep one of them for both.
#pragma once

#if !defined(MINIDL_CPU_ISA)  // a file that is compiled twice names its second copy itself
#if defined(__AVX512F__)
#define MINIDL_CPU_ISA isa_avx512
#elif defined(__AVX2__)
#define MINIDL_CPU_ISA isa_avx2
#else
#define MINIDL_CPU_ISA isa_generic
#endif
#endif

namespace minidl::cpu {
inline namespace MINIDL_CPU_ISA {

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

}  // namespace MINIDL_CPU_ISA
}  // namespace minidl::cpu
