// The rounding that the simulated cuda_fp16.h and cuda_bf16.h share. Every 16-bit result is
// rounded exactly once, as CUDA rounds it, and that one rounding is core/half.h's
// round-to-nearest-even from float (minidl::float_to_float16_bits / float_to_bfloat16_bits), the
// same function minidl's CPU kernels use. A value wider than float (a double, a 64-bit integer,
// the exact a·b + c of an fma) reaches it through round-to-odd: narrowed to float with the
// lowest bit set when anything was dropped, which keeps the later round-to-nearest-even correct
// (float has at least two bits more than either 16-bit format; Boldo & Melquiond, "Emulation of
// FMA and correctly rounded sums: proved algorithms using rounding to odd", 2008). Rounding the
// double to float to nearest first would round twice: 1 + 2^-10 + 2^-11 - 2^-31 would become the
// float16 tie 1 + 2^-10 + 2^-11 and then go to even, up, where the exact value goes down.
//
// NaN is the one place the simulated device differs from core/half.h, on purpose: CUDA returns
// its canonical NaN 0x7FFF for every NaN (CUDART_NAN_FP16 and CUDART_NAN_BF16 in NVIDIA's
// headers, and what their host code in cuda_fp16.hpp / cuda_bf16.hpp returns for a NaN input),
// while core/half.h follows PyTorch (0x7FC0 for bfloat16, sign | 0x7E00 for float16). A kernel
// that depended on the bits of a NaN would see them differ between a GPU and minidl's CPU
// kernels; here it sees what the GPU gives. Back to float, a float16 NaN becomes float's canonical
// NaN 0x7FFFFFFF, sign and payload dropped, as NVIDIA's __half2float does (core/half.h keeps
// them); a bfloat16 NaN keeps its bits, being float's upper half, in both. The device's NaNs are
// checked by tests/cuda/test_cuda_half_types.cpp, so a run on a GPU confirms the hardware's.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace cudasim::float16 {

inline constexpr uint16_t kCanonicalNan = 0x7fff;

// ---- the one rounding: float to 16 bits, nearest even (core/half.h), NaN canonical ----
inline uint16_t bfloat16_bits_rn(float f) {
  return std::isnan(f) ? kCanonicalNan : minidl::float_to_bfloat16_bits(f);
}
inline uint16_t float16_bits_rn(float f) { return std::isnan(f) ? kCanonicalNan : minidl::float_to_float16_bits(f); }

// ---- back to float: exact (core/half.h), a float16 NaN as float's canonical NaN ----
inline float float16_value(uint16_t h) {
  return (h & 0x7fffu) > 0x7c00u ? std::bit_cast<float>(0x7fffffffu) : minidl::float16_bits_to_float(h);
}

// ---- round-to-odd: wider values narrowed to float without a rounding of their own ----

// d as a float rounded to odd: d itself when it is a float (and ±Inf, NaN), otherwise d truncated
// toward zero with the lowest bit set. A double beyond the largest float truncates to it.
inline float narrow_to_odd(double d) {
  const float nearest = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(nearest) == d) return nearest;
  uint32_t bits = std::bit_cast<uint32_t>(nearest);
  if (std::fabs(static_cast<double>(nearest)) > std::fabs(d)) --bits;  // it rounded away from zero: step back
  return std::bit_cast<float>(bits | 1u);
}

// a + b as a double rounded to odd. The sum rounded to nearest plus its rounding error is exactly
// a + b (Knuth's TwoSum); when the error is not zero, the sum is truncated toward zero and made odd.
inline double sum_to_odd(double a, double b) {
  const double sum = a + b;
  if (!std::isfinite(sum)) return sum;
  const double b_part = sum - a;
  const double error = (a - (sum - b_part)) + (b - b_part);
  if (error == 0.0) return sum;
  uint64_t bits = std::bit_cast<uint64_t>(sum);
  if ((error > 0.0) != (sum > 0.0)) --bits;  // the exact value lies below |sum|: truncate
  return std::bit_cast<double>(bits | 1u);
}

// An integer as a double rounded to odd (exact below 2^53, so only 64-bit values are touched).
template <class Int>
inline double integer_to_odd(Int v) {
  static_assert(std::is_integral_v<Int>);
  bool negative = false;
  uint64_t magnitude = static_cast<uint64_t>(v);
  if constexpr (std::is_signed_v<Int>) {
    negative = v < 0;
    if (negative) magnitude = 0 - magnitude;
  }
  double d = static_cast<double>(magnitude);
  const int width = std::bit_width(magnitude);
  if (width > 53) {
    const int dropped = width - 53;
    uint64_t kept = magnitude >> dropped;
    if ((magnitude & ((uint64_t{1} << dropped) - 1)) != 0) kept |= 1u;
    d = std::ldexp(static_cast<double>(kept), dropped);
  }
  return negative ? -d : d;
}

}  // namespace cudasim::float16
