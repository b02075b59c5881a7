// The GELU of kernels/cpu/gelu.cpp per element, shared with the GEMM epilogue that fuses it
// (kernels/cpu/gemm.cpp): the same expressions give the same bits in both. The formulas, and why
// they are written without cancellation, are in gelu.cpp's header.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/ops/gelu.h"
#include "kernels/cpu/fast_math.h"

namespace minidl::cpu {

template <typename T>
struct GeluConstants {
  static constexpr T kSqrt1_2 = T(0.70710678118654752440);      // 1/√2
  static constexpr T kInvSqrt2Pi = T(0.39894228040143267794);   // 1/√(2π)
  static constexpr T kSqrt2OverPi = T(0.79788456080286535588);  // √(2/π)
  static constexpr T kKappa = T(0.044715);
};

template <typename T>
T gelu_value(T x, GeluApproximate form) {
  using C = GeluConstants<T>;
  if (form == GeluApproximate::None) return T(0.5) * x * fast_erfc(-x * C::kSqrt1_2);
  const T u = C::kSqrt2OverPi * (x + C::kKappa * x * x * x);
  return x / (T(1) + std::exp(T(-2) * u));
}

template <typename T>
T gelu_derivative(T x, GeluApproximate form) {
  using C = GeluConstants<T>;
  if (form == GeluApproximate::None)
    return T(0.5) * fast_erfc(-x * C::kSqrt1_2) + x * C::kInvSqrt2Pi * fast_exp_or_zero(T(-0.5) * x * x);
  const T u = C::kSqrt2OverPi * (x + C::kKappa * x * x * x);
  const T s = T(1) / (T(1) + std::exp(T(-2) * u));  // σ(2u)
  const T s_neg = T(1) / (T(1) + std::exp(T(2) * u));  // σ(−2u) = 1 − σ(2u)
  const T both = s * s_neg;
  if (both == T(0)) return s;  // Note [GELU without cancellation]
  const T du = C::kSqrt2OverPi * (T(1) + T(3) * C::kKappa * x * x);
  return s + T(2) * x * both * du;
}

// y[i] = gelu(x[i]) for i < n in `form`, one vector loop per form (y may be x).
template <typename T>
inline void gelu_values(const T* x, T* y, int64_t n, GeluApproximate form) {
  if (form == GeluApproximate::None) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_value<T>(x[i], GeluApproximate::None);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_value<T>(x[i], GeluApproximate::Tanh);
  }
}

}  // namespace minidl::cpu
