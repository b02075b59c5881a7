// CUDA's cuda_fp16.h for the simulated device (cudasim): the IEEE binary16 types __half and
// __half2 with CUDA's names, layout and semantics (NVIDIA's CUDA Math API, "Half Precision
// Intrinsics"), so that a 16-bit kernel in kernels/cuda compiles unchanged as C++ in a
// MINIDL_CUDA_SIM build and computes what it computes on a GPU.
//
// What it models:
//   - __half is 2 bytes, aligned to 2, its bits private as in CUDA (read them with
//     __half_as_ushort, or through __half_raw); __half2 is 4 bytes, aligned to 4, .x the low half
//     (the lower address), .y the high one. A __half2 copied from or to an address that is not
//     4-byte aligned is a misaligned-address fault, as on the GPU (cudasim/vector_types.h).
//   - conversions round to nearest even, once, through core/half.h (cudasim/float16_rounding.h
//     says how doubles and integers get there); a NaN becomes CUDA's canonical NaN 0x7FFF.
//     __half2float is exact, a NaN becoming float's canonical NaN as NVIDIA's does.
//   - arithmetic and comparisons compute in float and round the result once: float's 24 bits are
//     at least 2·11 + 2, so for + - * / that is the correctly rounded result the hardware gives
//     (Figueroa, "When is double rounding innocuous?", 1995). An fma is rounded once from its exact
//     value.
//   - constructors and assignments from float, double and the integer types, and the implicit
//     conversion to float, as CUDA 12 and 13's headers declare them for nvcc. Not modelled: CUDA's
//     conversion operators to the integer types and bool, and the __half <-> __nv_bfloat16
//     constructors; here those conversions go through operator float, which gives the same value
//     for every input in the target's range (NaN, Inf and out-of-range values, which CUDA
//     saturates, are undefined behaviour here as for a float). Nor the directed-rounding
//     (_rd/_ru/_rz) conversions, the math functions (hexp, hsqrt, ...), half atomics and
//     __half2 comparisons: a kernel that uses one fails to compile, never computes something else.
#pragma once

#include <cmath>
#include <cstdint>

#include "cudasim/device.h"
#include "cudasim/float16_rounding.h"
#include "cudasim/vector_types.h"

// ---- the types ----
struct alignas(2) __half_raw {
  unsigned short x;
};
struct alignas(4) __half2_raw {
  unsigned short x;
  unsigned short y;
};

struct alignas(2) __half {
 protected:
  unsigned short __x;

 public:
  __half() = default;  // uninitialised, as in CUDA
  constexpr __half(const __half_raw& hr) : __x(hr.x) {}
  __half(float f) : __x(cudasim::float16::float16_bits_rn(f)) {}
  __half(double d) : __half(cudasim::float16::narrow_to_odd(d)) {}
  __half(short v) : __half(static_cast<float>(v)) {}  // exact in float
  __half(unsigned short v) : __half(static_cast<float>(v)) {}
  __half(int v) : __half(cudasim::float16::integer_to_odd(v)) {}
  __half(unsigned int v) : __half(cudasim::float16::integer_to_odd(v)) {}
  __half(long v) : __half(cudasim::float16::integer_to_odd(v)) {}
  __half(unsigned long v) : __half(cudasim::float16::integer_to_odd(v)) {}
  __half(long long v) : __half(cudasim::float16::integer_to_odd(v)) {}
  __half(unsigned long long v) : __half(cudasim::float16::integer_to_odd(v)) {}

  operator float() const { return cudasim::float16::float16_value(__x); }
  operator __half_raw() const { return __half_raw{__x}; }
  operator __half_raw() const volatile { return __half_raw{__x}; }

  __half& operator=(const __half_raw& hr) {
    __x = hr.x;
    return *this;
  }
  volatile __half& operator=(const __half_raw& hr) volatile {
    __x = hr.x;
    return *this;
  }
  volatile __half& operator=(const volatile __half_raw& hr) volatile {
    __x = hr.x;
    return *this;
  }
  // CUDA declares no assignment from long or unsigned long: `h = 1L` is ambiguous there too.
  __half& operator=(float f) { return *this = __half(f); }
  __half& operator=(double d) { return *this = __half(d); }
  __half& operator=(short v) { return *this = __half(v); }
  __half& operator=(unsigned short v) { return *this = __half(v); }
  __half& operator=(int v) { return *this = __half(v); }
  __half& operator=(unsigned int v) { return *this = __half(v); }
  __half& operator=(long long v) { return *this = __half(v); }
  __half& operator=(unsigned long long v) { return *this = __half(v); }
};

struct alignas(4) __half2 {
  __half x;  // the low 16 bits
  __half y;  // the high 16 bits

  __half2() = default;
  constexpr __half2(const __half& a, const __half& b) : x(a), y(b) {}
  __half2(const __half2& src) {
    cudasim::check_vector_alignment(&src, alignof(__half2), false);
    x = src.x, y = src.y;
  }
  __half2& operator=(const __half2& src) {
    cudasim::check_vector_alignment(&src, alignof(__half2), false);
    cudasim::check_vector_alignment(this, alignof(__half2), true);
    x = src.x, y = src.y;
    return *this;
  }
  __half2(const __half2_raw& h2r) : x(__half_raw{h2r.x}), y(__half_raw{h2r.y}) {}
  __half2& operator=(const __half2_raw& h2r) { return *this = __half2(h2r); }
  operator __half2_raw() const {
    return __half2_raw{static_cast<__half_raw>(x).x, static_cast<__half_raw>(y).x};
  }
};

typedef __half half;
typedef __half2 half2;

static_assert(sizeof(__half) == 2 && alignof(__half) == 2 && sizeof(__half2) == 4 && alignof(__half2) == 4,
              "CUDA's layout of __half and __half2");

// ---- bits ----
inline unsigned short __half_as_ushort(const __half h) { return static_cast<__half_raw>(h).x; }
inline __half __ushort_as_half(const unsigned short i) { return __half_raw{i}; }

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7C00U)
#define CUDART_NAN_FP16 __ushort_as_half((unsigned short)0x7FFFU)
#define CUDART_MIN_DENORM_FP16 __ushort_as_half((unsigned short)0x0001U)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7BFFU)
#define CUDART_NEG_ZERO_FP16 __ushort_as_half((unsigned short)0x8000U)
#define CUDART_ZERO_FP16 __ushort_as_half((unsigned short)0x0000U)
#define CUDART_ONE_FP16 __ushort_as_half((unsigned short)0x3C00U)

// ---- conversions ----
inline __half __float2half(const float a) { return __half(a); }
inline __half __float2half_rn(const float a) { return __half(a); }
inline __half __double2half(const double a) { return __half(a); }
inline __half __short2half_rn(const short i) { return __half(i); }
inline __half __ushort2half_rn(const unsigned short i) { return __half(i); }
inline __half __int2half_rn(const int i) { return __half(i); }
inline __half __uint2half_rn(const unsigned int i) { return __half(i); }
inline __half __ll2half_rn(const long long i) { return __half(i); }
inline __half __ull2half_rn(const unsigned long long i) { return __half(i); }
inline float __half2float(const __half a) { return cudasim::float16::float16_value(__half_as_ushort(a)); }

inline __half2 make_half2(const __half x, const __half y) { return __half2(x, y); }
inline __half2 __halves2half2(const __half a, const __half b) { return __half2(a, b); }
inline __half2 __half2half2(const __half a) { return __half2(a, a); }
inline __half2 __floats2half2_rn(const float a, const float b) { return __half2(__half(a), __half(b)); }
inline __half2 __float2half2_rn(const float a) { return __half2half2(__half(a)); }
inline __half2 __float22half2_rn(const float2 a) { return __floats2half2_rn(a.x, a.y); }
inline float2 __half22float2(const __half2 a) { return make_float2(__half2float(a.x), __half2float(a.y)); }
inline float __low2float(const __half2 a) { return __half2float(a.x); }
inline float __high2float(const __half2 a) { return __half2float(a.y); }
inline __half __low2half(const __half2 a) { return a.x; }
inline __half __high2half(const __half2 a) { return a.y; }

// ---- arithmetic: in float, rounded once (the header comment says why that is exact) ----
inline __half __hadd(const __half a, const __half b) { return __half(__half2float(a) + __half2float(b)); }
inline __half __hsub(const __half a, const __half b) { return __half(__half2float(a) - __half2float(b)); }
inline __half __hmul(const __half a, const __half b) { return __half(__half2float(a) * __half2float(b)); }
inline __half __hdiv(const __half a, const __half b) { return __half(__half2float(a) / __half2float(b)); }
inline __half __hfma(const __half a, const __half b, const __half c) {
  // a·b is exact in double (22 bits); the sum is taken to odd so that the one rounding is the last.
  const double product = static_cast<double>(__half2float(a)) * static_cast<double>(__half2float(b));
  return __half(cudasim::float16::narrow_to_odd(cudasim::float16::sum_to_odd(product, __half2float(c))));
}
inline __half __hneg(const __half a) {
  return __ushort_as_half(static_cast<unsigned short>(__half_as_ushort(a) ^ 0x8000u));
}

inline __half2 __hadd2(const __half2 a, const __half2 b) { return __half2(__hadd(a.x, b.x), __hadd(a.y, b.y)); }
inline __half2 __hsub2(const __half2 a, const __half2 b) { return __half2(__hsub(a.x, b.x), __hsub(a.y, b.y)); }
inline __half2 __hmul2(const __half2 a, const __half2 b) { return __half2(__hmul(a.x, b.x), __hmul(a.y, b.y)); }
inline __half2 __h2div(const __half2 a, const __half2 b) { return __half2(__hdiv(a.x, b.x), __hdiv(a.y, b.y)); }
inline __half2 __hfma2(const __half2 a, const __half2 b, const __half2 c) {
  return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline __half2 __hneg2(const __half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }

// ---- comparisons: ordered (false when either is NaN) except __hneu, the unordered not-equal ----
inline bool __heq(const __half a, const __half b) { return __half2float(a) == __half2float(b); }
inline bool __hne(const __half a, const __half b) {
  return __half2float(a) < __half2float(b) || __half2float(a) > __half2float(b);
}
inline bool __hneu(const __half a, const __half b) { return !__heq(a, b); }
inline bool __hlt(const __half a, const __half b) { return __half2float(a) < __half2float(b); }
inline bool __hle(const __half a, const __half b) { return __half2float(a) <= __half2float(b); }
inline bool __hgt(const __half a, const __half b) { return __half2float(a) > __half2float(b); }
inline bool __hge(const __half a, const __half b) { return __half2float(a) >= __half2float(b); }
inline bool __hisnan(const __half a) { return std::isnan(__half2float(a)); }

// ---- operators, as CUDA defines them on the intrinsics ----
inline __half operator+(const __half& lh, const __half& rh) { return __hadd(lh, rh); }
inline __half operator-(const __half& lh, const __half& rh) { return __hsub(lh, rh); }
inline __half operator*(const __half& lh, const __half& rh) { return __hmul(lh, rh); }
inline __half operator/(const __half& lh, const __half& rh) { return __hdiv(lh, rh); }
inline __half& operator+=(__half& lh, const __half& rh) { return lh = __hadd(lh, rh); }
inline __half& operator-=(__half& lh, const __half& rh) { return lh = __hsub(lh, rh); }
inline __half& operator*=(__half& lh, const __half& rh) { return lh = __hmul(lh, rh); }
inline __half& operator/=(__half& lh, const __half& rh) { return lh = __hdiv(lh, rh); }
inline __half& operator++(__half& h) { return h += CUDART_ONE_FP16; }
inline __half& operator--(__half& h) { return h -= CUDART_ONE_FP16; }
inline __half operator++(__half& h, int) {
  const __half old = h;
  h += CUDART_ONE_FP16;
  return old;
}
inline __half operator--(__half& h, int) {
  const __half old = h;
  h -= CUDART_ONE_FP16;
  return old;
}
inline __half operator+(const __half& h) { return h; }
inline __half operator-(const __half& h) { return __hneg(h); }
inline bool operator==(const __half& lh, const __half& rh) { return __heq(lh, rh); }
inline bool operator!=(const __half& lh, const __half& rh) { return __hneu(lh, rh); }
inline bool operator<(const __half& lh, const __half& rh) { return __hlt(lh, rh); }
inline bool operator<=(const __half& lh, const __half& rh) { return __hle(lh, rh); }
inline bool operator>(const __half& lh, const __half& rh) { return __hgt(lh, rh); }
inline bool operator>=(const __half& lh, const __half& rh) { return __hge(lh, rh); }

inline __half2 operator+(const __half2& lh, const __half2& rh) { return __hadd2(lh, rh); }
inline __half2 operator-(const __half2& lh, const __half2& rh) { return __hsub2(lh, rh); }
inline __half2 operator*(const __half2& lh, const __half2& rh) { return __hmul2(lh, rh); }
inline __half2 operator/(const __half2& lh, const __half2& rh) { return __h2div(lh, rh); }
inline __half2& operator+=(__half2& lh, const __half2& rh) { return lh = __hadd2(lh, rh); }
inline __half2& operator-=(__half2& lh, const __half2& rh) { return lh = __hsub2(lh, rh); }
inline __half2& operator*=(__half2& lh, const __half2& rh) { return lh = __hmul2(lh, rh); }
inline __half2& operator/=(__half2& lh, const __half2& rh) { return lh = __h2div(lh, rh); }
inline __half2 operator+(const __half2& h) { return h; }
inline __half2 operator-(const __half2& h) { return __hneg2(h); }

// ---- warp shuffles, as CUDA declares them for these types: the 16 or 32 bits travel as one value ----
namespace cudasim {
inline __half shuffle_half(WarpOp op, unsigned mask, __half v, int arg, int width) {
  return __ushort_as_half(static_cast<unsigned short>(warp_collective(op, mask, __half_as_ushort(v), arg, width)));
}
inline __half2 shuffle_half2(WarpOp op, unsigned mask, __half2 v, int arg, int width) {
  const uint64_t bits = __half_as_ushort(v.x) | (static_cast<uint64_t>(__half_as_ushort(v.y)) << 16);
  const uint64_t got = warp_collective(op, mask, bits, arg, width);
  return __half2(__ushort_as_half(static_cast<unsigned short>(got)),
                 __ushort_as_half(static_cast<unsigned short>(got >> 16)));
}
}  // namespace cudasim
inline __half __shfl_sync(unsigned mask, __half var, int src_lane, int width = warpSize) {
  return cudasim::shuffle_half(cudasim::WarpOp::ShflIdx, mask, var, src_lane, width);
}
inline __half __shfl_up_sync(unsigned mask, __half var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_half(cudasim::WarpOp::ShflUp, mask, var, static_cast<int>(delta), width);
}
inline __half __shfl_down_sync(unsigned mask, __half var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_half(cudasim::WarpOp::ShflDown, mask, var, static_cast<int>(delta), width);
}
inline __half __shfl_xor_sync(unsigned mask, __half var, int lane_mask, int width = warpSize) {
  return cudasim::shuffle_half(cudasim::WarpOp::ShflXor, mask, var, lane_mask, width);
}
inline __half2 __shfl_sync(unsigned mask, __half2 var, int src_lane, int width = warpSize) {
  return cudasim::shuffle_half2(cudasim::WarpOp::ShflIdx, mask, var, src_lane, width);
}
inline __half2 __shfl_up_sync(unsigned mask, __half2 var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_half2(cudasim::WarpOp::ShflUp, mask, var, static_cast<int>(delta), width);
}
inline __half2 __shfl_down_sync(unsigned mask, __half2 var, unsigned delta, int width = warpSize) {
  return cudasim::shuffle_half2(cudasim::WarpOp::ShflDown, mask, var, static_cast<int>(delta), width);
}
inline __half2 __shfl_xor_sync(unsigned mask, __half2 var, int lane_mask, int width = warpSize) {
  return cudasim::shuffle_half2(cudasim::WarpOp::ShflXor, mask, var, lane_mask, width);
}
