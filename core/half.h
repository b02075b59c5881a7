// The two 16-bit floating formats, as C++ types the CPU kernels can hold: bfloat16 and float16.
//
//   float32   s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm   8 exponent bits, 23 mantissa bits
//   bfloat16  s eeeeeeee mmmmmmm                   float32's upper half: same range, 8-bit precision
//   float16   s eeeee mmmmmmmmmm                   IEEE binary16: 2^-24 .. 65504, 11-bit precision
//
// Both are storage formats here: arithmetic on them converts to float (the implicit conversion
// below), so `a + b` of two bfloat16 is a float sum, and a result is rounded back only where a
// kernel stores it, by an explicit bfloat16(x) / float16(x). That makes "16-bit inputs, float32
// math" the natural way to write a kernel, and an accidental 16-bit accumulator a compile error.
//
// The conversions are bit-exact with PyTorch's (c10::BFloat16, c10::Half) and with CUDA's
// __float2bfloat16 / __float2half: round to nearest, ties to even; ±Inf kept; values past the
// format's largest finite value round to ±Inf exactly as IEEE says (float16: from 65520 up);
// subnormals produced and read as IEEE says (float16 down to 2^-24; bfloat16 keeps float32's).
// NaN stays NaN: bfloat16 gives the canonical quiet NaN 0x7FC0 (PyTorch's choice, whatever the
// sign and payload), float16 keeps the sign and gives 0x7E00. Wider inputs (double) round to
// float first, as PyTorch's casts do. No dependencies beyond the standard library: the
// simulated CUDA device's cuda_bf16.h / cuda_fp16.h build on these same functions.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace minidl {

// ---- the bits ----
constexpr uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  // Adding 0x7fff rounds up exactly the values above the halfway point; the low bit of the kept
  // half adds one more at the halfway point when that half is odd: ties to even. A carry runs
  // into the exponent, which is right (it rounds up to the next binade, or to Inf).
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

constexpr float bfloat16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

constexpr uint16_t float_to_float16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;                        // |f|
  if (a > 0x7f800000u) return sign | 0x7e00;                 // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00;                // |f| >= 65520 (and Inf): Inf
  if (a >= 0x38800000u) {                                    // |f| >= 2^-14: a normal float16
    const uint32_t r = a - 0x38000000u;                      // exponent rebiased from 127 to 15
    return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);  // keep 10 of 23 bits, ties to even
  }
  if (a <= 0x33000000u) return sign;                         // |f| <= 2^-25: the tie at 2^-25 goes to even, 0
  // A subnormal: the value in units of 2^-24 is the 24-bit significand shifted right by 126 - e
  // (14 to 24 places here), rounded to nearest, ties to even. A round-up to 0x400 is the smallest
  // normal, encoded correctly by the same bits.
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  const uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return sign | static_cast<uint16_t>(kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u));
}

constexpr float float16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));  // Inf, NaN (payload kept)
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  // Zero or a subnormal m·2^-24: exact in float (m < 2^10).
  const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

// The conversions the float16 type uses at run time: the x86 F16C instructions where the build
// targets a CPU that has them (-march=native), which round to nearest even as IEEE says and cost
// one instruction instead of the branches above; the functions above otherwise, and always in a
// constant expression. A NaN still goes through the function above on the way to float16 (the
// instruction would keep part of its payload, and the bits must stay PyTorch's 0x7E00).
inline uint16_t float_to_float16_bits_fast(float f) {
#if defined(__F16C__)
  if (f != f) return float_to_float16_bits(f);
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
  return float_to_float16_bits(f);
#endif
}
inline float float16_bits_to_float_fast(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return float16_bits_to_float(h);
#endif
}

// ---- the types ----
// bfloat16(x) rounds; float(b) is exact. from_bits / bits() reach the encoding itself.
struct bfloat16 {
  uint16_t x = 0;
  bfloat16() = default;
  explicit constexpr bfloat16(float f) : x(float_to_bfloat16_bits(f)) {}
  explicit constexpr bfloat16(double d) : bfloat16(static_cast<float>(d)) {}
  explicit constexpr bfloat16(int i) : bfloat16(static_cast<float>(i)) {}  // T(0), T(1) in generic kernels
  constexpr operator float() const { return bfloat16_bits_to_float(x); }
  static constexpr bfloat16 from_bits(uint16_t bits) {
    bfloat16 b;
    b.x = bits;
    return b;
  }
  constexpr uint16_t bits() const { return x; }
};

struct float16 {
  uint16_t x = 0;
  float16() = default;
  explicit constexpr float16(float f)
      : x(std::is_constant_evaluated() ? float_to_float16_bits(f) : float_to_float16_bits_fast(f)) {}
  explicit constexpr float16(double d) : float16(static_cast<float>(d)) {}
  explicit constexpr float16(int i) : float16(static_cast<float>(i)) {}  // T(0), T(1) in generic kernels
  constexpr operator float() const {
    return std::is_constant_evaluated() ? float16_bits_to_float(x) : float16_bits_to_float_fast(x);
  }
  static constexpr float16 from_bits(uint16_t bits) {
    float16 h;
    h.x = bits;
    return h;
  }
  constexpr uint16_t bits() const { return x; }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2, "16-bit formats must be two bytes, as stored");

template <typename T> inline constexpr bool is_half_v = false;
template <> inline constexpr bool is_half_v<bfloat16> = true;
template <> inline constexpr bool is_half_v<float16> = true;

// One element converted from S to D as the dtype casts convert it: into a 16-bit format through
// float (PyTorch's order: a double or an int64 rounds to float first), otherwise static_cast.
template <typename D, typename S>
constexpr D convert(S s) {
  if constexpr (is_half_v<D>) return D(static_cast<float>(s));
  else return static_cast<D>(s);
}

// The type a kernel computes and accumulates in for elements of type T: float for the 16-bit
// formats, T itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<bfloat16> { using type = float; };
template <> struct compute_type<float16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

}  // namespace minidl
