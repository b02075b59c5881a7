// Which GEMM the CUDA backend's matmul and linear use: the hand-written kernels (the default:
// the kernel gemm_plan.h's table picks for the dtype, device and shape, the tensor-core one for
// 16-bit matrices on sm_80 and later), the hand-written SIMT kernel for every dtype (simt_gemm.cu:
// float32 math whatever the dtype, so a 16-bit product is the float32 one rounded), or cuBLAS
// (cublas_gemm.cu, fp32, no TF32), the baseline they are measured against. A process-wide
// setting for users, tests and benchmarks; its initial value comes from the environment
// variable MINIDL_GEMM=native|simt|cublas. It is the CUDA backend's business alone (the
// CPU has one GEMM), so it lives here rather than in core; it is plain C++, built with or
// without CUDA, so a program that prints or sets it compiles either way.
#pragma once

#include <cstdint>

namespace minidl {

enum class GemmImpl : uint8_t { Native, Simt, Cublas };
GemmImpl gemm_impl();  // throws minidl::Error on first use if MINIDL_GEMM holds anything else
void set_gemm_impl(GemmImpl impl);
const char* gemm_impl_name(GemmImpl impl);  // "native", "simt" or "cublas"

}  // namespace minidl
