// CUDA's cuda_bf16.h for the simulated device (cudasim): the bfloat16 types __nv_bfloat16 and
// __nv_bfloat162 with CUDA's names, layout and semantics (NVIDIA's CUDA Math API, "Bfloat16
// Precision Intrinsics"), so that a 16-bit kernel in kernels/cuda compiles unchanged as C++ in a
// MINIDL_CUDA_SIM build and computes what it computes on a GPU.
//
// What it models (the same as cuda_fp16.h, whose header comment has the details):
//   - __nv_bfloat16 is 2 bytes, aligned to 2, its bits private (__bfloat16_as_ushort,
//     __nv_bfloat16_raw); __nv_bfloat162 is 4 bytes, aligned to 4, .x the low half, .y the high;
//     a __nv_bfloat162 copied through a misaligned address is a misaligned-address fault.
//   - conversions round to nearest even, once, through core/half.h; a NaN becomes CUDA's
//     canonical NaN 0x7FFF (core/half.h gives 0x7FC0). __bfloat162float is exact.
//   - arithmetic computes in float and rounds once, which is correctly rounded for + - * / (float
//     has more than 2·8 + 2 bits, and every bfloat16 sum or product that falls among float's
//     subnormals keeps its bits there: bfloat16 subnormals are float subnormals); an fma rounds
//     once from its exact value.
//   - constructors and assignments from float, double and the integer types, and the implicit
//     conversion to float, as CUDA 12 and 13's headers declare them for nvcc. Not modelled: CUDA's
//     conversion operators to the integer types and bool, the __nv_bfloat16 <-> __half
//     constructors (those conversions go through operator float here: the same value for every
//     input in the target's range), the directed-rounding conversions, the math functions,
//     bfloat16 atomics and __nv_bfloat162 comparisons: a kernel that uses one fails to compile.
#pragma once

#include <cmath>
#include <cstdint>

#include "cudasim/device.h"
#include "cudasim/float16_rounding.h"
#include "cudasim/vector_types.h"

// ---- the types ----
struct alignas(2) __nv_bfloat16_raw {
  unsigned short x;
};
struct alignas(4) __nv_bfloat162_raw {
  unsigned short x;
  unsigned short y;
};

struct alignas(2) __nv_bfloat16 {
 protected:
  unsigned short __x;

 public:
  __nv_bfloat16() = default;  // uninitialised, as in CUDA
  constexpr __nv_bfloat16(const __nv_bfloat16_raw& hr) : __x(hr.x) {}
  __nv_bfloat16(float f) : __x(cudasim::float16::bfloat16_bits_rn(f)) {}
  __nv_bfloat16(double d) : __nv_bfloat16(cudasim::float16::narrow_to_odd(d)) {}
  __nv_bfloat16(short v) : __nv_bfloat16(static_cast<float>(v)) {}  // exact in float
  __nv_bfloat16(unsigned short v) : __nv_bfloat16(static_cast<float>(v)) {}
  __nv_bfloat16(int v) : __nv_bfloat16(cudasim::float16::integer_to_odd(v)) {}
  __nv_bfloat16(unsigned int v) : __nv_bfloat16(cudasim::float16::integer_to_odd(v)) {}
  __nv_bfloat16(long v) : __nv_bfloat16(cudasim::float16::integer_to_odd(v)) {}
  __nv_bfloat16(unsigned long v) : __nv_bfloat16(cudasim::float16::integer_to_odd(v)) {}
  __nv_bfloat16(long long v) : __nv_bfloat16(cudasim::float16::integer_to_odd(v)) {}
  __nv_bfloat16(unsigned long long v) : __nv_bfloat16(cudasim::float16::integer_to_odd(v)) {}

  operator float() const { return minidl::bfloat16_bits_to_float(__x); }
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
  operator __nv_bfloat16_raw() const volatile { return __nv_bfloat16_raw{__x}; }

  __nv_bfloat16& operator=(const __nv_bfloat16_raw& hr) {
    __x = hr.x;
    return *this;
  }
  volatile __nv_bfloat16& operator=(const __nv_bfloat16_raw& hr) volatile {
    __x = hr.x;
    return *this;
  }
  volatile __nv_bfloat16& operator=(const volatile __nv_bfloat16_raw& hr) volatile {
    __x = hr.x;
    return *this;
  }
  // As in CUDA, no assignment from long or unsigned long.
  __nv_bfloat16& operator=(float f) { return *this = __nv_bfloat16(f); }
  __nv_bfloat16& operator=(double d) { return *this = __nv_bfloat16(d); }
  __nv_bfloat16& operator=(short v) { return *this = __nv_bfloat16(v); }
  __nv_bfloat16& operator=(unsigned short v) { return *this = __nv_bfloat16(v); }
  __nv_bfloat16& operator=(int v) { return *this = __nv_bfloat16(v); }
  __nv_bfloat16& operator=(unsigned int v) { return *this = __nv_bfloat16(v); }
  __nv_bfloat16& operator=(long long v) { return *this = __nv_bfloat16(v); }
  __nv_bfloat16& operator=(unsigned long long v) { return *this = __nv_bfloat16(v); }
};

struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x;  // the low 16 bits
  __nv_bfloat16 y;  // the high 16 bits

  __nv_bfloat162() = default;
  constexpr __nv_bfloat162(const __nv_bfloat16& a, const __nv_bfloat16& b) : x(a), y(b) {}
  __nv_bfloat162(const __nv_bfloat162& src) {
    cudasim::check_vector_alignment(&src, alignof(__nv_bfloat162), false);
    x = src.x, y = src.y;
  }
  __nv_bfloat162& operator=(const __nv_bfloat162& src) {
    cudasim::check_vector_alignment(&src, alignof(__nv_bfloat162), false);
    cudasim::check_vector_alignment(this, alignof(__nv_bfloat162), true);
    x = src.x, y = src.y;
    return *this;
  }
  __nv_bfloat162(const __nv_bfloat162_raw& h2r) : x(__nv_bfloat16_raw{h2r.x}), y(__nv_bfloat16_raw{h2r.y}) {}
  __nv_bfloat162& operator=(const __nv_bfloat162_raw& h2r) { return *this = __nv_bfloat162(h2r); }
  operator __nv_bfloat162_raw() const {
    return __nv_bfloat162_raw{static_cast<__nv_bfloat16_raw>(x).x, static_cast<__nv_bfloat16_raw>(y).x};
  }
};

typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

static_assert(sizeof(__nv_bfloat16) == 2 && alignof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4 &&
                  alignof(__nv_bfloat162) == 4,
              "CUDA's layout of __nv_bfloat16 and __nv_bfloat162");

// ---- bits ----
inline unsigned short __bfloat16_as_ushort(const __nv_bfloat16 h) { return static_cast<__nv_bfloat16_raw>(h).x; }
inline __nv_bfloat16 __ushort_as_bfloat16(const unsigned short i) { return __nv_bfloat16_raw{i}; }

#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_BF16 __ushort_as_bfloat16((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_NEG_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x8000U)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)

// ---- conversions ----
inline __nv_bfloat16 __float2bfloat16(const float a) { return __nv_bfloat16(a); }
inline __nv_bfloat16 __float2bfloat16_rn(const float a) { return __nv_bfloat16(a); }
inline __nv_bfloat16 __double2bfloat16(const double a) { return __nv_bfloat16(a); }
inline __nv_bfloat16 __short2bfloat16_rn(const short i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __ushort2bfloat16_rn(const unsigned short i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __int2bfloat16_rn(const int i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __uint2bfloat16_rn(const unsigned int i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __ll2bfloat16_rn(const long long i) { return __nv_bfloat16(i); }
inline __nv_bfloat16 __ull2bfloat16_rn(const unsigned long long i) { return __nv_bfloat16(i); }
inline float __bfloat162float(const __nv_bfloat16 a) { return minidl::bfloat16_bits_to_float(__bfloat16_as_ushort(a)); }

inline __nv_bfloat162 make_bfloat162(const __nv_bfloat16 x, const __nv_bfloat16 y) { return __nv_bfloat162(x, y); }
inline __nv_bfloat162 __halves2bfloat162(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
inline __nv_bfloat162 __bfloat162bfloat162(const __nv_bfloat16 a) { return __nv_bfloat162(a, a); }
inline __nv_bfloat162 __floats2bfloat162_rn(const float a, const float b) {
  return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b));
}
inline __nv_bfloat162 __float2bfloat162_rn(const float a) { return __bfloat162bfloat162(__nv_bfloat16(a)); }
inline __nv_bfloat162 __float22bfloat162_rn(const float2 a) { return __floats2bfloat162_rn(a.x, a.y); }
inline float2 __bfloat1622float2(const __nv_bfloat162 a) {
  return make_float2(__bfloat162float(a.x), __bfloat162float(a.y));
}
inline float __low2float(const __nv_bfloat162 a) { return __bfloat162float(a.x); }
inline float __high2float(const __nv_bfloat162 a) { return __bfloat162float(a.y); }
inline __nv_bfloat16 __low2bfloat16(const __nv_bfloat162 a) { return a.x; }
inline __nv_bfloat16 __high2bfloat16(const __nv_bfloat162 a) { return a.y; }

// ---- arithmetic: in float, rounded once (the header comment says why that is exact) ----
inline __nv_bfloat16 __hadd(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __nv_bfloat16(__bfloat162float(a) + __bfloat162float(b));
}
inline __nv_bfloat16 __hsub(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __nv_bfloat16(__bfloat162float(a) - __bfloat162float(b));
}
inline __nv_bfloat16 __hmul(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __nv_bfloat16(__bfloat162float(a) * __bfloat162float(b));
}
inline __nv_bfloat16 __hdiv(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __nv_bfloat16(__bfloat162float(a) / __bfloat162float(b));
}
inline __nv_bfloat16 __hfma(const __nv_bfloat16 a, const __nv_bfloat16 b, const __nv_bfloat16 c) {
  // a·b is exact in double (16 bits, exponents well inside double's); the sum is taken to odd.
  const double product = static_cast<double>(__bfloat162float(a)) * static_cast<double>(__bfloat162float(b));
  return __nv_bfloat16(cudasim::float16::narrow_to_odd(cudasim::float16::sum_to_odd(product, __bfloat162float(c))));
}
inline __nv_bfloat16 __hneg(const __nv_bfloat16 a) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(__bfloat16_as_ushort(a) ^ 0x8000u));
}

inline __nv_bfloat162 __hadd2(const __nv_bfloat162 a, const __nv_bfloat162 b) {
  return __nv_bfloat162(__hadd(a.x, b.x), __hadd(a.y, b.y));
}
inline __nv_bfloat162 __hsub2(const __nv_bfloat162 a, const __nv_bfloat162 b) {
  return __nv_bfloat162(__hsub(a.x, b.x), __hsub(a.y, b.y));
}
inline __nv_bfloat162 __hmul2(const __nv_bfloat162 a, const __nv_bfloat162 b) {
  return __nv_bfloat162(__hmul(a.x, b.x), __hmul(a.y, b.y));
}
inline __nv_bfloat162 __h2div(const __nv_bfloat162 a, const __nv_bfloat162 b) {
  return __nv_bfloat162(__hdiv(a.x, b.x), __hdiv(a.y, b.y));
}
inline __nv_bfloat162 __hfma2(const __nv_bfloat162 a, const __nv_bfloat162 b, const __nv_bfloat162 c) {
  return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline __nv_bfloat162 __hneg2(const __nv_bfloat162 a) { return __nv_bfloat162(__hneg(a.x), __hneg(a.y)); }

// ---- comparisons: ordered (false when either is NaN) except __hneu, the unordered not-equal ----
inline bool __heq(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) == __bfloat162float(b); }
inline bool __hne(const __nv_bfloat16 a, const __nv_bfloat16 b) {
  return __bfloat162float(a) < __bfloat162float(b) || __bfloat162float(a) > __bfloat162float(b);
}
inline bool __hneu(const __nv_bfloat16 a, const __nv_bfloat16 b) { return !__heq(a, b); }
inline bool __hlt(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) < __bfloat162float(b); }
inline bool __hle(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) <= __bfloat162float(b); }
inline bool __hgt(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) > __bfloat162float(b); }
inline bool __hge(const __nv_bfloat16 a, const __nv_bfloat16 b) { return __bfloat162float(a) >= __bfloat162float(b); }
inline bool __hisnan(const __nv_bfloat16 a) { return std::isnan(__bfloat162float(a)); }

// ---- operators, as CUDA defines them on the intrinsics ----
inline __nv_bfloat16 operator+(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hadd(lh, rh); }
inline __nv_bfloat16 operator-(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hsub(lh, rh); }
inline __nv_bfloat16 operator*(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hmul(lh, rh); }
inline __nv_bfloat16 operator/(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hdiv(lh, rh); }
inline __nv_bfloat16& operator+=(__nv_bfloat16& lh, const __nv_bfloat16& rh) { return lh = __hadd(lh, rh); }
inline __nv_bfloat16& operator-=(__nv_bfloat16& lh, const __nv_bfloat16& rh) { return lh = __hsub(lh, rh); }
inline __nv_bfloat16& operator*=(__nv_bfloat16& lh, const __nv_bfloat16& rh) { return lh = __hmul(lh, rh); }
inline __nv_bfloat16& operator/=(__nv_bfloat16& lh, const __nv_bfloat16& rh) { return lh = __hdiv(lh, rh); }
inline __nv_bfloat16& operator++(__nv_bfloat16& h) { return h += CUDART_ONE_BF16; }
inline __nv_bfloat16& operator--(__nv_bfloat16& h) { return h -= CUDART_ONE_BF16; }
inline __nv_bfloat16 operator++(__nv_bfloat16& h, int) {
  const __nv_bfloat16 old = h;
  h += CUDART_ONE_BF16;
  return old;
}
inline __nv_bfloat16 operator--(__nv_bfloat16& h, int) {
  const __nv_bfloat16 old = h;
  h -= CUDART_ONE_BF16;
  return old;
}
inline __nv_bfloat16 operator+(const __nv_bfloat16& h) { return h; }
inline __nv_bfloat16 operator-(const __nv_bfloat16& h) { return __hneg(h); }
inline bool operator==(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __heq(lh, rh); }
inline bool operator!=(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hneu(lh, rh); }
inline bool operator<(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hlt(lh, rh); }
inline bool operator<=(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hle(lh, rh); }
inline bool operator>(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hgt(lh, rh); }
inline bool operator>=(const __nv_bfloat16& lh, const __nv_bfloat16& rh) { return __hge(lh, rh); }

inline __nv_bfloat162 operator+(const __nv_bfloat162& lh, const __nv_bfloat162& rh) { return __hadd2(lh, rh); }
inline __nv_bfloat162 operator-(const __nv_bfloat162& lh, const __nv_bfloat162& rh) { return __hsub2(lh, rh); }
inline __nv_bfloat162 operator*(const __nv_bfloat162& lh, const __nv_bfloat162& rh) { return __hmul2(lh, rh); }
inline __nv_bfloat162 operator/(const __nv_bfloat162& lh, const __nv_bfloat162& rh) { return __h2div(lh, rh); }
inline __nv_bfloat162& operator+=(__nv_bfloat162& lh, const __nv_bfloat162& rh) { return lh = __hadd2(lh, rh); }
inline __nv_bfloat162& operator-=(__nv_bfloat162& lh, const __nv_bfloat162& rh) { return lh = __hsub2(lh, rh); }
inline __nv_bfloat162& operator*=(__nv_bfloat162& lh, const __nv_bfloat162& rh) { return lh = __hmul2(lh, rh); }
inline __nv_bfloat162& operator/=(__nv_bfloat162& lh, const __nv_bfloat162& rh) { return lh = __h2div(lh, rh); }
inline __nv_bfloat162 operator+(const __nv_bfloat162& h) { return h; }
inline __nv_bfloat162 operator-(const __nv_bfloat162& h) { return __hneg2(h); }

// ---- warp shuffles, as CUDA declares them for these types: the 16 or 32 bits travel as one value ----
namespace cudasim {
inline __nv_bfloat16 shuffle_bfloat16(WarpOp op, unsigned mask, __nv_bfloat16 v, int arg, int width) {
  return __ushort_as_bfloat16(
      static_cast<unsigned short>(warp_collective(op, mask, __bfloat16_as_ushort(v), arg, width)));
}
inline __nv_bfloat162 shuffle_bfloat162(WarpOp op, unsigned mask, __nv_bfloat162 v, int arg, int width) {
  const uint64_t bits = __bfloat16_as_ushort(v.x) | (static_cast<uint64_t>(__bfloat16_as_ushort(v.y)) << 16);
  const uint64_t got = warp_collective(op, mask, bits, arg, width);
  return __nv_bfloat162(__ushort_as_bfloat16(static_cast<unsigned short>(got)),
                        __ushort_as_bfloat16(static_cast<unsigned short>(got >> 16)));
}
}  // namespace cudasim
inline __nv_bfloat16 __shfl_sync(unsigned mask, __nv_bfloat16 var, int src_lane, int width = warpSize) {
  return cudasim::shuffle_bfloat16(cudasim::WarpOp::ShflIdx, mask, var, src_lane, width);
}
inline __nv_bfloat16 __shfl_up_sync(unsigned mask, __nv_bfloat16 var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_bfloat16(cudasim::WarpOp::ShflUp, mask, var, static_cast<int>(delta), width);
}
inline __nv_bfloat16 __shfl_down_sync(unsigned mask, __nv_bfloat16 var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_bfloat16(cudasim::WarpOp::ShflDown, mask, var, static_cast<int>(delta), width);
}
inline __nv_bfloat16 __shfl_xor_sync(unsigned mask, __nv_bfloat16 var, int lane_mask, int width = warpSize) {
  return cudasim::shuffle_bfloat16(cudasim::WarpOp::ShflXor, mask, var, lane_mask, width);
}
inline __nv_bfloat162 __shfl_sync(unsigned mask, __nv_bfloat162 var, int src_lane, int width = warpSize) {
  return cudasim::shuffle_bfloat162(cudasim::WarpOp::ShflIdx, mask, var, src_lane, width);
}
inline __nv_bfloat162 __shfl_up_sync(unsigned mask, __nv_bfloat162 var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_bfloat162(cudasim::WarpOp::ShflUp, mask, var, static_cast<int>(delta), width);
}
inline __nv_bfloat162 __shfl_down_sync(unsigned mask, __nv_bfloat162 var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_bfloat162(cudasim::WarpOp::ShflDown, mask, var, static_cast<int>(delta), width);
}
inline __nv_bfloat162 __shfl_xor_sync(unsigned mask, __nv_bfloat162 var, int lane_mask, int width = warpSize) {
  return cudasim::shuffle_bfloat162(cudasim::WarpOp::ShflXor, mask, var, lane_mask, width);
}
