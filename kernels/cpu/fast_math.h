// exp and erfc in float written so the compiler vectorises them: a loop under `omp simd`
// (parallel_for's loops) that calls std::exp or std::erfc stays scalar, one libm call per
// element, and in the char-GPT's CPU step GELU's erfc alone took more time than its whole
// attention forward. These are branch-free (selects, no calls), so the loop runs 8 or 16 lanes
// at a time. Double keeps libm (its users are the float64 gradient checks, not speed).
//
// fast_exp(x): Cephes' expf. x = n·ln2 + r with |r| <= ln2/2 (ln 2 in two parts, so r is
// exact), a degree-6 polynomial for exp(r), 2^n put into the exponent bits: within 2 ulp.
// Only arithmetic and selects: no libm call survives in it (checked with objdump -dr), since a
// call is what keeps a loop scalar without -ffast-math.
// Clamped to [-87.3, 88]: 1e-38 at the bottom instead of 0 or a denormal, which is what its
// callers that add it to something want; fast_exp_or_zero gives 0 there instead.
//
// fast_erfc(z): erfc(|z|) = t·exp(−z² + P(t)), t = 1/(1 + |z|/2), P a degree-9 polynomial
// (Numerical Recipes' erfcc, relative error below 1.2e-7 over the whole line), and
// erfc(−|z|) = 2 − erfc(|z|). Relative accuracy in the tail, where GELU needs it
// (Note [GELU without cancellation], kernels/cpu/gelu.cpp), needs exp(−z²) to stay accurate
// although z² = 80 has an ulp of 8e-6: z² is kept as two floats hi + lo (an fma gives the
// rounding error lo exactly), exp(−hi) is exact to 2 ulp because hi is an exact float, and
// exp(−lo) = 1 − lo to float precision. Past |z| = 10 erfc is below float's normal range
// (erfc(9.2) is 1e-38) and the result is 0 (or 2).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace minidl::cpu {

inline float fast_exp(float x) {
  // Selects, not std::fmax/fmin: those are libm calls that keep the loop scalar. NaN fails
  // both comparisons and becomes -87.3 (as fmax would make it).
  x = x > -87.3f ? x : -87.3f;
  x = x < 88.0f ? x : 88.0f;
  // n = round(x / ln 2) by the magic-number trick: adding 1.5·2^23 leaves no fraction bits, so
  // the addition rounds to an integer (std::floor or std::rint would be a libm call again).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln 2 = 0.693359375 − 2.12194440e-4
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return y * two_n;
}
inline double fast_exp(double x) { return std::exp(x); }

// exp(x), 0 below -87.3 (where float's normal range ends) and for x = -inf.
inline float fast_exp_or_zero(float x) { return x < -87.3f ? 0.0f : fast_exp(x); }
inline double fast_exp_or_zero(double x) { return std::exp(x); }

inline float fast_erfc(float z) {
  float a = std::fabs(z);
  a = a < 10.0f ? a : 10.0f;  // also catches NaN; GELU multiplies by x, which keeps NaN
  const float t = 1.0f / (1.0f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float hi = a * a;
  const float lo = std::fma(a, a, -hi);  // a² = hi + lo exactly
  const float r = t * fast_exp_or_zero(-hi) * fast_exp(p) * (1.0f - lo);
  return z >= 0.0f ? r : 2.0f - r;
}
inline double fast_erfc(double z) { return std::erfc(z); }

}  // namespace minidl::cpu
