// CPU GELU, elementwise, in T (float or double; 16-bit elements in float by blocks, rounded on
// store: Note [GELU in 16 bits by blocks]) — the expressions of kernels/cuda/gelu.cu:
//   None: y = 0.5·x·erfc(−x/√2)                       (= x·Φ(x) = 0.5·x·(1 + erf(x/√2)))
//         dy/dx = 0.5·erfc(−x/√2) + x·exp(−x²/2)/√(2π)
//   Tanh: u = √(2/π)·(x + 0.044715·x³)
//         y = x / (1 + exp(−2u))                       (= 0.5·x·(1 + tanh u) = x·σ(2u))
//         dy/dx = σ(2u) + 2x·σ(2u)·σ(−2u)·u',  u' = √(2/π)·(1 + 3·0.044715·x²)
// Note [GELU without cancellation]: the textbook forms 1 + erf(z) and 1 + tanh(u) lose every
// digit for negative x, where erf and tanh approach −1 (at x = −5 in float32, 1 + tanh u is
// below one ulp of 1, and 1 + erf(−5/√2) keeps one digit). erfc(−z) = 1 + erf(z) and
// 2σ(2u) = 1 + tanh u are the same functions computed without that subtraction, so y and dy/dx
// keep a few ulps of relative accuracy over the whole line. σ(−2u) = 1/(1 + exp(2u)) is
// computed as such, not as 1 − σ(2u), for the same reason. Where σ(2u)·σ(−2u) is 0 (|x| so
// large that exp over- or underflows) the second term is 0; skipping it keeps u' = inf (x² past
// the float range) from turning 0·inf into NaN.
// Speed: the exact form's erfc and exp are kernels/cpu/fast_math.h's in float (branch-free, so
// the loop vectorises; libm's erfcf was a fifth of the char-GPT's CPU step), libm's in double.
// Each form has a loop of its own, so neither carries the other's branch.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fast_math.h"

namespace minidl::cpu {

namespace {

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

// Note [GELU in 16 bits by blocks]: for 16-bit elements. Converting inside the math loop keeps it
// from vectorising (a float16 conversion is an instruction per element and a NaN test), so each
// block of kBlock elements is widened into float, run through the float loop, and rounded back.
// The same float math per element as the float32 kernel, so the same bits as staging.
constexpr int64_t kBlock = 512;

template <typename Body>
void by_blocks(int64_t n, Body body) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_rows(blocks, n, [&](int64_t b) {
    const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
    alignas(64) float in[kBlock], extra[kBlock], out[kBlock];
    body(begin, count, in, extra, out);
  });
}

template <typename T>
void gelu_forward_half(const T* px, T* py, int64_t n, GeluApproximate form) {
  by_blocks(n, [&](int64_t begin, int64_t count, float* in, float*, float* out) {
    for (int64_t i = 0; i < count; ++i) in[i] = px[begin + i];
    if (form == GeluApproximate::None) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) out[i] = gelu_value<float>(in[i], GeluApproximate::None);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) out[i] = gelu_value<float>(in[i], GeluApproximate::Tanh);
    }
    for (int64_t i = 0; i < count; ++i) py[begin + i] = T(out[i]);
  });
}

template <typename T>
void gelu_backward_half(const T* pdy, const T* px, T* pdx, int64_t n, GeluApproximate form) {
  by_blocks(n, [&](int64_t begin, int64_t count, float* in, float* dy, float* out) {
    for (int64_t i = 0; i < count; ++i) in[i] = px[begin + i];
    for (int64_t i = 0; i < count; ++i) dy[i] = pdy[begin + i];
    if (form == GeluApproximate::None) {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) out[i] = dy[i] * gelu_derivative<float>(in[i], GeluApproximate::None);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) out[i] = dy[i] * gelu_derivative<float>(in[i], GeluApproximate::Tanh);
    }
    for (int64_t i = 0; i < count; ++i) pdx[begin + i] = T(out[i]);
  });
}

}  // namespace

void CpuBackend::gelu_forward(const Tensor& x, Tensor& y, GeluApproximate approximate) {
  dispatch_floating_and_half(x.dtype(), "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    if constexpr (is_half_v<T>) {
      gelu_forward_half(px, py, x.numel(), approximate);
    } else if (approximate == GeluApproximate::None) {
      parallel_for(x.numel(), [=](int64_t i) { py[i] = gelu_value(px[i], GeluApproximate::None); });
    } else {
      parallel_for(x.numel(), [=](int64_t i) { py[i] = gelu_value(px[i], GeluApproximate::Tanh); });
    }
  });
}

void CpuBackend::gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate) {
  dispatch_floating_and_half(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* px = x.data<T>();
    T* pdx = dx.data<T>();
    if constexpr (is_half_v<T>) {
      gelu_backward_half(pdy, px, pdx, x.numel(), approximate);
    } else if (approximate == GeluApproximate::None) {
      parallel_for(x.numel(), [=](int64_t i) { pdx[i] = pdy[i] * gelu_derivative(px[i], GeluApproximate::None); });
    } else {
      parallel_for(x.numel(), [=](int64_t i) { pdx[i] = pdy[i] * gelu_derivative(px[i], GeluApproximate::Tanh); });
    }
  });
}

}  // namespace minidl::cpu
