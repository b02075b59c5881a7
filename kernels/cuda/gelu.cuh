// GELU's math per element on the device (float in, float out), shared by the GELU kernels
// (gelu.cu) and the GEMM epilogues that fuse it (gemm/simt_gemm.cu, gemm/mma_gemm.cu,
// gemm/cublas_gemm.cu): one expression, so the fused and the separate op give the same bits.
// The formulas, and why erfc and σ replace 1 + erf and 1 + tanh, are in gelu.cu's header.
#pragma once

#include "core/ops/gelu.h"

namespace minidl::cuda {

namespace gelu_constants {
constexpr float kSqrt1_2 = 0.70710678118654752440f;      // 1/√2
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1/√(2π)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // √(2/π)
constexpr float kKappa = 0.044715f;
}  // namespace gelu_constants

template <GeluApproximate kForm>
__device__ inline float gelu_value(float x) {
  using namespace gelu_constants;
  if constexpr (kForm == GeluApproximate::None) {
    return 0.5f * x * erfcf(-x * kSqrt1_2);
  } else {
    const float u = kSqrt2OverPi * (x + kKappa * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
  }
}

// The form chosen at run time (a GEMM's epilogue: the form is uniform over the launch).
__device__ inline float gelu_value(float x, GeluApproximate form) {
  return form == GeluApproximate::None ? gelu_value<GeluApproximate::None>(x) : gelu_value<GeluApproximate::Tanh>(x);
}

template <GeluApproximate kForm>
__device__ inline float gelu_derivative(float x) {
  using namespace gelu_constants;
  if constexpr (kForm == GeluApproximate::None) {
    return 0.5f * erfcf(-x * kSqrt1_2) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  } else {
    const float u = kSqrt2OverPi * (x + kKappa * x * x * x);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));     // σ(2u)
    const float s_neg = 1.0f / (1.0f + expf(2.0f * u));  // σ(−2u) = 1 − σ(2u)
    const float both = s * s_neg;
    if (both == 0.0f) return s;  // Note [GELU without cancellation]: no 0·inf when x² overflows
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kKappa * x * x);
    return s + 2.0f * x * both * du;
  }
}

}  // namespace minidl::cuda
