// The CPU GEMM (kernels/cpu/gemm.cpp) compiled a second time, for AVX2 and FMA without AVX-512
// (-march=x86-64-v3, set in tests/CMakeLists.txt), into minidl::cpu::gemm_avx2: the build uses
// -march=native, so on an AVX-512 machine the library holds only the AVX-512 kernels, and
// this copy is how the 6 × 16 micro-kernel of CPUs without AVX-512 is tested there too
// (tests/kernels/test_gemm_avx2.cpp). Its vector types and tile_product live in an inline
// namespace of their own (kernels/cpu/simd.h), isa_avx2_test, so that even on an AVX2 machine
// (whose library uses isa_avx2) nothing here replaces the library's kernels. The inline
// functions of the other headers it includes are compiled here for x86-64-v3 too, and the
// linker may keep those copies for the whole test binary: the file is compiled only where the
// configuring machine runs AVX2 + FMA (tests/CMakeLists.txt), so the tests run where they were built.
#define MINIDL_GEMM_NAMESPACE gemm_avx2
#define MINIDL_CPU_ISA isa_avx2_test
#include "kernels/cpu/gemm.cpp"
