// The CPU GEMM (kernels/cpu/gemm.cpp) compiled a second time, for AVX2 and FMA without AVX-512
// (-march=x86-64-v3, set in tests/CMakeLists.txt), into minidl::cpu::gemm_avx2: the build uses
// -march=native, so on an AVX-512 machine the library holds only the AVX-512 kernels, and
// this copy is how the 6 × 16 micro-kernel of CPUs without AVX-512 is tested there too
// (tests/kernels/test_gemm_avx2.cpp). Its vector types live in their own inline namespace
// (kernels/cpu/simd.h), so nothing here replaces the library's own definitions.
#define MINIDL_GEMM_NAMESPACE gemm_avx2
#include "kernels/cpu/gemm.cpp"
