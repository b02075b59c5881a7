// CUDA's 16-bit float types on the device (cuda_bf16.h, cuda_fp16.h) against minidl's host
// conversions (core/half.h) and against exact arithmetic, bit for bit:
//   - float -> __nv_bfloat16 / __half by every spelling (__float2bfloat16, _rn, the constructor;
//     __float2half, _rn, the constructor) on a table of edge cases (ties to even both ways, ±0,
//     ±Inf, NaN, the largest finite values, 65504 / 65519.99 / 65520, the smallest subnormals 2^-24
//     and 2^-149, round-ups into the next binade) and on 10^5 float bit patterns (all of float,
//     float16's exponent range, and exact ties), equal to core/half.h's; a NaN becomes CUDA's
//     canonical NaN 0x7FFF;
//   - every 16-bit pattern back to float (exact; a float16 NaN becomes float's canonical NaN, as
//     NVIDIA's __half2float gives it); the paired conversions, with .x in the low half;
//   - doubles and integers rounded once, to the exactly rounded value (the double roundings that
//     a detour through float would make are in the table);
//   - + - * / and their 2-wide forms against float arithmetic rounded once, which is the correctly
//     rounded result (float carries at least 2p + 2 bits); fma against the exact a·b + c rounded
//     once; comparisons with NaN; ++ --, compound assignments; warp shuffles of the pair types.
// The kernels compile with nvcc against NVIDIA's headers as well as against the simulated
// device's (cudasim/include), so on a GPU the same checks hold NVIDIA's conversions to core/half.h.
// tests/CMakeLists.txt compiles tests/cuda/*.cpp with the host compiler, so a GPU build compiles
// this file's cases only once it marks the file LANGUAGE CUDA; the simulated device runs them
// all. NaN is compared as NaN where CUDA's bits differ from core/half.h's (said where).
#if defined(MINIDL_CUDA_SIM) || defined(__CUDACC__)

#include <catch2/catch.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "kernels/cuda/cuda_check.h"
#include "device_array.h"

namespace {

using minidl::cuda_test::DeviceArray;
using minidl::cuda_test::launch;

// ---- kernels: each writes plain bit patterns or floats, so the host reads no CUDA type ----

__device__ inline int first_index() { return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); }
__device__ inline int stride() { return static_cast<int>(gridDim.x * blockDim.x); }

constexpr int kFloatTo16Rows = 6;
// out [6, n]: bfloat16 by __float2bfloat16, __float2bfloat16_rn, the constructor; float16 the same.
__global__ void float_to_16bit_kernel(const float* in, int n, unsigned short* out) {
  for (int i = first_index(); i < n; i += stride()) {
    const float x = in[i];
    out[0 * n + i] = __bfloat16_as_ushort(__float2bfloat16(x));
    out[1 * n + i] = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    out[2 * n + i] = __bfloat16_as_ushort(__nv_bfloat16(x));
    out[3 * n + i] = __half_as_ushort(__float2half(x));
    out[4 * n + i] = __half_as_ushort(__float2half_rn(x));
    out[5 * n + i] = __half_as_ushort(__half(x));
  }
}

constexpr int kSixteenBitPatterns = 65536;
// out [4, 65536]: each bit pattern as bfloat16 by __bfloat162float and operator float; float16 the same.
__global__ void sixteen_bit_to_float_kernel(float* out) {
  const int n = kSixteenBitPatterns;
  for (int i = first_index(); i < n; i += stride()) {
    const auto bits = static_cast<unsigned short>(i);
    out[0 * n + i] = __bfloat162float(__ushort_as_bfloat16(bits));
    out[1 * n + i] = static_cast<float>(__ushort_as_bfloat16(bits));
    out[2 * n + i] = __half2float(__ushort_as_half(bits));
    out[3 * n + i] = static_cast<float>(__ushort_as_half(bits));
  }
}

constexpr int kPairRows = 5, kPairFloatRows = 8, kPairPartRows = 8;
// For pair i of (a, b) = (in[2i], in[2i+1]):
//   bf, h [5, m]: __floats2*_rn(a, b), __float22*_rn({a, b}), make_*2 and __halves2*2 of the
//                 scalar conversions, and __float2*2_rn(a) (both halves a);
//   back [8, m]: the bfloat16 pair's __bfloat1622float2 .x .y, __low2float, __high2float; the
//                 half pair's the same;
//   parts [8, m]: the pairs' .x .y and __low2*, __high2* as bits (bfloat16, then half).
__global__ void pair_kernel(const float* in, int m, __nv_bfloat162* bf, __half2* h, float* back,
                            unsigned short* parts) {
  for (int i = first_index(); i < m; i += stride()) {
    const float a = in[2 * i], b = in[2 * i + 1];
    const __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    const __half2 q = __floats2half2_rn(a, b);
    bf[0 * m + i] = p;
    bf[1 * m + i] = __float22bfloat162_rn(make_float2(a, b));
    bf[2 * m + i] = make_bfloat162(__float2bfloat16(a), __float2bfloat16(b));
    bf[3 * m + i] = __halves2bfloat162(__float2bfloat16(a), __float2bfloat16(b));
    bf[4 * m + i] = __float2bfloat162_rn(a);
    h[0 * m + i] = q;
    h[1 * m + i] = __float22half2_rn(make_float2(a, b));
    h[2 * m + i] = make_half2(__float2half(a), __float2half(b));
    h[3 * m + i] = __halves2half2(__float2half(a), __float2half(b));
    h[4 * m + i] = __float2half2_rn(a);
    const float2 pf = __bfloat1622float2(p), qf = __half22float2(q);
    back[0 * m + i] = pf.x;
    back[1 * m + i] = pf.y;
    back[2 * m + i] = __low2float(p);
    back[3 * m + i] = __high2float(p);
    back[4 * m + i] = qf.x;
    back[5 * m + i] = qf.y;
    back[6 * m + i] = __low2float(q);
    back[7 * m + i] = __high2float(q);
    parts[0 * m + i] = __bfloat16_as_ushort(p.x);
    parts[1 * m + i] = __bfloat16_as_ushort(p.y);
    parts[2 * m + i] = __bfloat16_as_ushort(__low2bfloat16(p));
    parts[3 * m + i] = __bfloat16_as_ushort(__high2bfloat16(p));
    parts[4 * m + i] = __half_as_ushort(q.x);
    parts[5 * m + i] = __half_as_ushort(q.y);
    parts[6 * m + i] = __half_as_ushort(__low2half(q));
    parts[7 * m + i] = __half_as_ushort(__high2half(q));
  }
}

constexpr int kWideRows = 20;
// out [20, n]: rows 0-9 bfloat16, 10-19 float16, each from d (the __double2* function, the
// constructor), ll (__ll2*_rn, constructor), ull (__ull2*_rn, constructor), i32 (__int2*_rn) and
// u32 (__uint2*_rn, constructor).
__global__ void wide_to_16bit_kernel(const double* d, const long long* ll, const unsigned long long* ull,
                                     const int* i32, const unsigned* u32, int n, unsigned short* out) {
  for (int i = first_index(); i < n; i += stride()) {
    out[0 * n + i] = __bfloat16_as_ushort(__double2bfloat16(d[i]));
    out[1 * n + i] = __bfloat16_as_ushort(__nv_bfloat16(d[i]));
    out[2 * n + i] = __bfloat16_as_ushort(__ll2bfloat16_rn(ll[i]));
    out[3 * n + i] = __bfloat16_as_ushort(__nv_bfloat16(ll[i]));
    out[4 * n + i] = __bfloat16_as_ushort(__ull2bfloat16_rn(ull[i]));
    out[5 * n + i] = __bfloat16_as_ushort(__nv_bfloat16(ull[i]));
    out[6 * n + i] = __bfloat16_as_ushort(__int2bfloat16_rn(i32[i]));
    out[7 * n + i] = __bfloat16_as_ushort(__nv_bfloat16(i32[i]));
    out[8 * n + i] = __bfloat16_as_ushort(__uint2bfloat16_rn(u32[i]));
    out[9 * n + i] = __bfloat16_as_ushort(__nv_bfloat16(u32[i]));
    out[10 * n + i] = __half_as_ushort(__double2half(d[i]));
    out[11 * n + i] = __half_as_ushort(__half(d[i]));
    out[12 * n + i] = __half_as_ushort(__ll2half_rn(ll[i]));
    out[13 * n + i] = __half_as_ushort(__half(ll[i]));
    out[14 * n + i] = __half_as_ushort(__ull2half_rn(ull[i]));
    out[15 * n + i] = __half_as_ushort(__half(ull[i]));
    out[16 * n + i] = __half_as_ushort(__int2half_rn(i32[i]));
    out[17 * n + i] = __half_as_ushort(__half(i32[i]));
    out[18 * n + i] = __half_as_ushort(__uint2half_rn(u32[i]));
    out[19 * n + i] = __half_as_ushort(__half(u32[i]));
  }
}

__device__ inline unsigned short bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ inline unsigned short bits_of(__half v) { return __half_as_ushort(v); }
template <class T>
__device__ T from_bits(unsigned short b);
template <>
__device__ inline __nv_bfloat16 from_bits<__nv_bfloat16>(unsigned short b) { return __ushort_as_bfloat16(b); }
template <>
__device__ inline __half from_bits<__half>(unsigned short b) { return __ushort_as_half(b); }

// The rows of arithmetic_kernel's output, one per operation on (a, b, c); P = (a, b), Q = (b, c),
// R = (c, a) are the pairs. The host's reference for each is in arithmetic_reference().
enum ArithmeticRow : int {
  kAdd, kSub, kMul, kDiv, kFma, kOpAdd, kOpSub, kOpMul, kOpDiv, kNeg, kOpNeg,
  kAdd2X, kAdd2Y, kSub2X, kSub2Y, kMul2X, kMul2Y, kDiv2X, kDiv2Y, kFma2X, kFma2Y,
  kPairOpsX, kPairOpsY,          // (P * Q + R) with the pair operators: two roundings
  kNeg2X,                        // (-P).x
  kCompound,                     // t = a; t += b; t *= c; t -= a; t /= b
  kPreIncrement, kPostIncrement, kAfterIncrements, kAfterDecrements,
  kPairCompoundX, kPairCompoundY,  // P2 = P; P2 += Q; P2 *= R
  kComparisons,                  // a bit per comparison, kComparisonNames order
  kArithmeticRows
};
const char* const kArithmeticRowNames[kArithmeticRows] = {
    "__hadd", "__hsub", "__hmul", "__hdiv", "__hfma", "+", "-", "*", "/", "__hneg", "unary -",
    "__hadd2 .x", "__hadd2 .y", "__hsub2 .x", "__hsub2 .y", "__hmul2 .x", "__hmul2 .y", "__h2div .x", "__h2div .y",
    "__hfma2 .x", "__hfma2 .y", "(P * Q + R).x", "(P * Q + R).y", "(-P).x", "+= *= -= /=",
    "++u", "u++", "u after ++ and ++", "u after -- and --", "pair += *= .x", "pair += *= .y", "comparisons"};
const char* const kComparisonNames[] = {"__heq", "__hne", "__hneu", "__hlt", "__hle", "__hgt", "__hge", "__hisnan(a)",
                                        "==",    "!=",    "<",      "<=",    ">",     ">="};

template <class T, class T2>
__global__ void arithmetic_kernel(const unsigned short* a_bits, const unsigned short* b_bits,
                                  const unsigned short* c_bits, int n, unsigned short* out) {
  for (int i = first_index(); i < n; i += stride()) {
    const T a = from_bits<T>(a_bits[i]), b = from_bits<T>(b_bits[i]), c = from_bits<T>(c_bits[i]);
    const T2 p(a, b), q(b, c), r(c, a);
    unsigned short* o = out + i;
    o[kAdd * n] = bits_of(__hadd(a, b));
    o[kSub * n] = bits_of(__hsub(a, b));
    o[kMul * n] = bits_of(__hmul(a, b));
    o[kDiv * n] = bits_of(__hdiv(a, b));
    o[kFma * n] = bits_of(__hfma(a, b, c));
    o[kOpAdd * n] = bits_of(a + b);
    o[kOpSub * n] = bits_of(a - b);
    o[kOpMul * n] = bits_of(a * b);
    o[kOpDiv * n] = bits_of(a / b);
    o[kNeg * n] = bits_of(__hneg(a));
    o[kOpNeg * n] = bits_of(-a);
    const T2 sum = __hadd2(p, q), difference = __hsub2(p, q), product = __hmul2(p, q), quotient = __h2div(p, q);
    const T2 fused = __hfma2(p, q, r), operators = p * q + r, negated = -p;
    o[kAdd2X * n] = bits_of(sum.x);
    o[kAdd2Y * n] = bits_of(sum.y);
    o[kSub2X * n] = bits_of(difference.x);
    o[kSub2Y * n] = bits_of(difference.y);
    o[kMul2X * n] = bits_of(product.x);
    o[kMul2Y * n] = bits_of(product.y);
    o[kDiv2X * n] = bits_of(quotient.x);
    o[kDiv2Y * n] = bits_of(quotient.y);
    o[kFma2X * n] = bits_of(fused.x);
    o[kFma2Y * n] = bits_of(fused.y);
    o[kPairOpsX * n] = bits_of(operators.x);
    o[kPairOpsY * n] = bits_of(operators.y);
    o[kNeg2X * n] = bits_of(negated.x);
    T t = a;
    t += b;
    t *= c;
    t -= a;
    t /= b;
    o[kCompound * n] = bits_of(t);
    T u = a;
    o[kPreIncrement * n] = bits_of(++u);   // a + 1
    o[kPostIncrement * n] = bits_of(u++);  // still a + 1
    o[kAfterIncrements * n] = bits_of(u);  // (a + 1) + 1
    --u;
    u--;
    o[kAfterDecrements * n] = bits_of(u);  // ((a + 1) + 1 - 1) - 1
    T2 p2 = p;
    p2 += q;
    p2 *= r;
    o[kPairCompoundX * n] = bits_of(p2.x);
    o[kPairCompoundY * n] = bits_of(p2.y);
    const bool compared[] = {__heq(a, b), __hne(a, b), __hneu(a, b), __hlt(a, b), __hle(a, b), __hgt(a, b), __hge(a, b),
                             __hisnan(a), a == b,      a != b,       a < b,       a <= b,      a > b,       a >= b};
    unsigned mask = 0;
    for (int k = 0; k < 14; ++k) mask |= compared[k] ? 1u << k : 0u;
    o[kComparisons * n] = static_cast<unsigned short>(mask);
  }
}

// One warp: lane l holds the pair (l, 100 + l) in each type; out [10, 32] bits of the .x and .y
// after __shfl_xor_sync(1), __shfl_down_sync(1), __shfl_up_sync(2), __shfl_sync(lane 5) of the
// bfloat16 pair and __shfl_xor_sync(3) of a scalar __half.
constexpr int kShuffleRows = 10;
__global__ void pair_shuffle_kernel(unsigned short* out) {
  const int lane = static_cast<int>(threadIdx.x);
  const __half2 h(__int2half_rn(lane), __int2half_rn(100 + lane));
  const __nv_bfloat162 b(__int2bfloat16_rn(lane), __int2bfloat16_rn(100 + lane));
  const unsigned all = 0xffffffffu;
  const __half2 hx = __shfl_xor_sync(all, h, 1), hd = __shfl_down_sync(all, h, 1u), hu = __shfl_up_sync(all, h, 2u);
  const __nv_bfloat162 bs = __shfl_sync(all, b, 5);
  const __half scalar = __shfl_xor_sync(all, h.x, 3);
  const unsigned short row[kShuffleRows] = {
      __half_as_ushort(hx.x), __half_as_ushort(hx.y),         __half_as_ushort(hd.x), __half_as_ushort(hd.y),
      __half_as_ushort(hu.x), __half_as_ushort(hu.y),         __bfloat16_as_ushort(bs.x), __bfloat16_as_ushort(bs.y),
      __half_as_ushort(scalar), __bfloat16_as_ushort(b.x)};
  for (int k = 0; k < kShuffleRows; ++k) out[k * 32 + lane] = row[k];
}

// ---- host side ----

constexpr int kThreads = 256;
unsigned blocks_for(int n) {
  const int blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 128 ? 128 : blocks));
}

void start_on_device_zero() {
  MINIDL_CUDA_CHECK(cudaSetDevice(0));
  (void)cudaGetLastError();
}

// The two formats on the host: core/half.h's conversions and the encoding's parameters.
struct Bfloat16 {
  static constexpr const char* kName = "bfloat16";
  static constexpr int kMantissaBits = 7, kExponentOffset = 134;  // a normal value is (1.m)·2^(e - 127)
  static constexpr uint16_t kMaxFinite = 0x7f7f, kInf = 0x7f80;
  static uint16_t round(float f) { return minidl::float_to_bfloat16_bits(f); }
  static float value(uint16_t b) { return minidl::bfloat16_bits_to_float(b); }
};
struct Float16 {
  static constexpr const char* kName = "float16";
  static constexpr int kMantissaBits = 10, kExponentOffset = 25;  // (1.m)·2^(e - 15)
  static constexpr uint16_t kMaxFinite = 0x7bff, kInf = 0x7c00;
  static uint16_t round(float f) { return minidl::float_to_float16_bits(f); }
  static float value(uint16_t b) { return minidl::float16_bits_to_float(b); }
};

template <class F>
bool is_nan_bits(uint16_t b) {
  return (b & 0x7fffu) > F::kInf;
}

// A finite pattern's magnitude as M·2^E, M an integer.
struct Scaled {
  long long m;
  int e;
};
template <class F>
Scaled decompose(uint16_t b) {
  const int exponent = (b & 0x7fff) >> F::kMantissaBits;
  const long long mantissa = b & ((1 << F::kMantissaBits) - 1);
  if (exponent == 0) return {mantissa, 1 - F::kExponentOffset};
  return {mantissa | (1LL << F::kMantissaBits), exponent - F::kExponentOffset};
}

// The sign of m·2^e - mag·2^-s, for m < 2^13 and 0 <= mag < 2^110.
int compare_scaled(long long m, int e, __int128 mag, int s) {
  if (m == 0 || mag == 0) return (m > 0) - (mag > 0);
  const int k = e + s;  // compare m·2^k with mag
  if (k >= 0) {
    if (k > 110) return 1;
    const __int128 lhs = static_cast<__int128>(m) << k;
    return (lhs > mag) - (lhs < mag);
  }
  if (-k > 110 || mag >= (static_cast<__int128>(1) << 13)) return -1;  // mag·2^-k > m
  const __int128 rhs = mag << -k;
  return (m > rhs) - (m < rhs);
}

// The pattern nearest x·2^-s, ties to even, past the largest finite value's half-ulp to Inf: the
// IEEE rounding by its definition, found by bisection over the ordered patterns. An exact zero
// takes the sign given.
template <class F>
uint16_t round_exact(__int128 x, int s, bool negative_zero = false) {
  if (x == 0) return negative_zero ? 0x8000 : 0;
  const uint16_t sign = x < 0 ? 0x8000 : 0;
  const __int128 mag = x < 0 ? -x : x;
  unsigned lo = 0, hi = F::kMaxFinite;  // the largest pattern whose value is <= |x|
  while (lo < hi) {
    const unsigned mid = (lo + hi + 1) / 2;
    const Scaled v = decompose<F>(static_cast<uint16_t>(mid));
    if (compare_scaled(v.m, v.e, mag, s) <= 0) lo = mid;
    else hi = mid - 1;
  }
  const Scaled v = decompose<F>(static_cast<uint16_t>(lo));
  if (compare_scaled(v.m, v.e, mag, s) == 0) return static_cast<uint16_t>(sign | lo);
  // The next pattern (Inf after the largest finite) lies 2^e above: compare with the midpoint.
  const int midpoint = compare_scaled(2 * v.m + 1, v.e - 1, mag, s);
  const unsigned chosen = midpoint < 0 ? lo + 1 : midpoint > 0 ? lo : (lo % 2 == 0 ? lo : lo + 1);
  return static_cast<uint16_t>(sign | chosen);
}

// a·b + c rounded once, exactly; false when the exact value needs more than the bits this
// reference holds (bfloat16 operands more than about 2^50 apart).
template <class F>
bool exact_fma(uint16_t a, uint16_t b, uint16_t c, uint16_t& result) {
  if (is_nan_bits<F>(a) || is_nan_bits<F>(b) || is_nan_bits<F>(c) || (a & 0x7fff) == F::kInf ||
      (b & 0x7fff) == F::kInf || (c & 0x7fff) == F::kInf) {
    // Inf or NaN in: the result is Inf or NaN, which IEEE arithmetic in double gets right.
    result = F::round(static_cast<float>(std::fma(static_cast<double>(F::value(a)), F::value(b), F::value(c))));
    return true;
  }
  const Scaled sa = decompose<F>(a), sb = decompose<F>(b), sc = decompose<F>(c);
  const bool product_negative = ((a ^ b) & 0x8000) != 0, c_negative = (c & 0x8000) != 0;
  const long long product = sa.m * sb.m;
  const int product_e = sa.e + sb.e;
  if (product == 0 && sc.m == 0) {
    result = round_exact<F>(0, 0, product_negative && c_negative);
    return true;
  }
  const int low = product == 0 ? sc.e : sc.m == 0 ? product_e : std::min(product_e, sc.e);
  const int s = -low;
  if ((product != 0 && product_e + s > 80) || (sc.m != 0 && sc.e + s > 80)) return false;
  const __int128 p = static_cast<__int128>(product) << (product == 0 ? 0 : product_e + s);
  const __int128 q = static_cast<__int128>(sc.m) << (sc.m == 0 ? 0 : sc.e + s);
  result = round_exact<F>((product_negative ? -p : p) + (c_negative ? -q : q), s);
  return true;
}

// A double as x·2^-s (exact: 53 bits).
template <class F>
uint16_t round_double_exact(double d) {
  if (std::isnan(d)) return 0x7fff;
  if (std::isinf(d)) return d < 0 ? static_cast<uint16_t>(0x8000 | F::kInf) : F::kInf;
  int e = 0;
  const double fraction = std::frexp(d, &e);
  const auto m = static_cast<long long>(std::ldexp(fraction, 53));
  return round_exact<F>(m, 53 - e, std::signbit(d));
}

std::string hex(unsigned v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Counts the patterns that differ from the reference (a NaN reference: any NaN, when
// `nan_as_nan`); reports the first few.
class BitMismatches {
 public:
  explicit BitMismatches(std::string what) : what_(std::move(what)) {}
  template <class F>
  void check(uint16_t got, uint16_t want, const std::string& input, bool nan_as_nan) {
    const bool same = (nan_as_nan && is_nan_bits<F>(want)) ? is_nan_bits<F>(got) : got == want;
    if (!same) add(input + ": got " + hex(got) + ", want " + hex(want));
  }
  void add(const std::string& mismatch) {
    if (count_++ < 8) first_ << "\n  " << mismatch;
  }
  ~BitMismatches() {
    INFO(what_ << ": " << count_ << " mismatch(es)" << first_.str());
    CHECK(count_ == 0);
  }
  BitMismatches(const BitMismatches&) = delete;
  BitMismatches& operator=(const BitMismatches&) = delete;

 private:
  std::string what_;
  std::ostringstream first_;
  long count_ = 0;
};

std::string float_input(float x) { return "float " + hex(std::bit_cast<uint32_t>(x)); }

float from_bits32(uint32_t u) { return std::bit_cast<float>(u); }

// The edge cases, as float bit patterns (and why each is there).
std::vector<float> edge_floats() {
  const uint32_t patterns[] = {
      // ±0, ±Inf; NaN: quiet, negative, signalling, payloads
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0x7fffffff, 0xffbfffff,
      // 1, -1, 0.1, -pi, 1e-8, 1e8, 1e38
      0x3f800000, 0xbf800000, 0x3dcccccd, 0xc0490fdb, 0x322bcc77, 0x4cbebc20, 0x7e967699,
      // bfloat16: ties to even both ways and just either side; ties that round up into the next binade
      0x3f808000, 0x3f818000, 0xbf808000, 0xbf818000, 0x3f807fff, 0x3f808001, 0x3fff8000, 0x3f7f8000,
      // bfloat16's largest finite, its tie to Inf, float's largest
      0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7fffff,
      // 2^-149, ties among the subnormals, 2^-133 (bfloat16's smallest), float's largest subnormal, smallest normal
      0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x00010000, 0x007fffff, 0x00800000,
      // float16: 65504, 65519.99 (the float below 65520), 65520 (the tie to Inf), 65536, and negated
      0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, 0xc77fe000, 0xc77fefff, 0xc77ff000,
      // float16: ±2^-24, 2^-25 (the tie to 0) and either side, 3·2^-25 (the tie up to 2·2^-24)
      0x33800000, 0xb3800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33c00000,
      // float16: 2^-14; subnormals that round up to the smallest normal, one by a tie; one that does not
      0x38800000, 0x387fffff, 0x387fc000, 0x387fbfff,
      // float16: ties to even both ways and either side; round-ups into the next binade (the second to Inf)
      0x3f801000, 0x3f803000, 0x3f801001, 0x3f800fff, 0xbf803000, 0x3ffff000, 0x477fffff,
  };
  std::vector<float> out;
  for (uint32_t p : patterns) out.push_back(from_bits32(p));
  return out;
}

// 10^5 float bit patterns: anything, float16's exponent range, and exact ties of each format.
std::vector<float> random_floats(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<float> out;
  for (int i = 0; i < 40000; ++i) out.push_back(from_bits32(static_cast<uint32_t>(gen())));
  for (int i = 0; i < 30000; ++i) {
    const auto u = static_cast<uint32_t>(gen());
    const uint32_t exponent = 100 + static_cast<uint32_t>(gen() % 46);  // 2^-27 .. 2^18
    out.push_back(from_bits32((u & 0x807fffffu) | (exponent << 23)));
  }
  for (int i = 0; i < 15000; ++i) out.push_back(from_bits32((static_cast<uint32_t>(gen()) & 0xffff0000u) | 0x8000u));
  for (int i = 0; i < 15000; ++i) {
    const auto u = static_cast<uint32_t>(gen());
    const uint32_t exponent = 100 + static_cast<uint32_t>(gen() % 46);
    out.push_back(from_bits32((u & 0x807fe000u) | (exponent << 23) | 0x1000u));
  }
  return out;
}

}  // namespace

TEST_CASE("float to bfloat16 and float16 on the device equals core/half.h bit for bit", "[cuda][half]") {
  start_on_device_zero();
  std::vector<float> inputs = edge_floats();
  const std::vector<float> random = random_floats(1);
  inputs.insert(inputs.end(), random.begin(), random.end());
  const int n = static_cast<int>(inputs.size());
  const DeviceArray<float> in(inputs);
  const DeviceArray<unsigned short> out(static_cast<size_t>(kFloatTo16Rows) * n);
  launch(float_to_16bit_kernel, blocks_for(n), kThreads, in.get(), n, out.get());
  const std::vector<unsigned short> got = out.read();
  const char* const spellings[] = {"__float2bfloat16", "__float2bfloat16_rn", "__nv_bfloat16(float)",
                                   "__float2half",     "__float2half_rn",     "__half(float)"};
  for (int row = 0; row < kFloatTo16Rows; ++row) {
    // NaN as NaN: CUDA gives its canonical NaN 0x7FFF, core/half.h PyTorch's 0x7FC0 (bfloat16) or
    // sign | 0x7E00 (float16); the next case checks CUDA's.
    BitMismatches mismatches(spellings[row]);
    for (int i = 0; i < n; ++i) {
      const float x = inputs[static_cast<size_t>(i)];
      const uint16_t g = got[static_cast<size_t>(row) * n + i];
      if (row < 3) mismatches.check<Bfloat16>(g, Bfloat16::round(x), float_input(x), true);
      else mismatches.check<Float16>(g, Float16::round(x), float_input(x), true);
    }
  }
}

TEST_CASE("a NaN converts to CUDA's canonical NaN 0x7FFF in both formats, whatever its sign and payload",
          "[cuda][half]") {
  start_on_device_zero();
  const std::vector<float> nans = {from_bits32(0x7fc00000), from_bits32(0xffc00000), from_bits32(0x7f800001),
                                   from_bits32(0xff812345), from_bits32(0x7fffffff)};
  const int n = static_cast<int>(nans.size());
  const DeviceArray<float> in(nans);
  const DeviceArray<unsigned short> out(static_cast<size_t>(kFloatTo16Rows) * n);
  launch(float_to_16bit_kernel, 1, kThreads, in.get(), n, out.get());
  for (unsigned short bits : out.read()) CHECK(hex(bits) == "0x7fff");
  CHECK(__half_as_ushort(CUDART_NAN_FP16) == 0x7fff);
  CHECK(__bfloat16_as_ushort(CUDART_NAN_BF16) == 0x7fff);
}

TEST_CASE("a float16 NaN converts to float's canonical NaN, a bfloat16 NaN keeps its bits", "[cuda][half]") {
  start_on_device_zero();
  const DeviceArray<float> out(4 * static_cast<size_t>(kSixteenBitPatterns));
  launch(sixteen_bit_to_float_kernel, blocks_for(kSixteenBitPatterns), kThreads, out.get());
  const std::vector<uint32_t> got = out.read<uint32_t>();
  for (const unsigned bits : {0x7c01u, 0x7e00u, 0x7fffu, 0xfe00u, 0xfc01u, 0x7d23u}) {
    INFO("float16 " << hex(bits));
    CHECK(hex(got[2 * kSixteenBitPatterns + bits]) == "0x7fffffff");  // __half2float
    CHECK(hex(got[3 * kSixteenBitPatterns + bits]) == "0x7fffffff");  // operator float
  }
  for (const unsigned bits : {0x7f81u, 0x7fc0u, 0xffffu, 0xff80u + 0x12u}) {
    INFO("bfloat16 " << hex(bits));
    CHECK(hex(got[bits]) == hex(bits << 16));
    CHECK(hex(got[kSixteenBitPatterns + bits]) == hex(bits << 16));
  }
}

TEST_CASE("every bfloat16 and float16 bit pattern converts back to core/half.h's float", "[cuda][half]") {
  start_on_device_zero();
  const DeviceArray<float> out(4 * static_cast<size_t>(kSixteenBitPatterns));
  launch(sixteen_bit_to_float_kernel, blocks_for(kSixteenBitPatterns), kThreads, out.get());
  const std::vector<uint32_t> got = out.read<uint32_t>();
  long mismatches = 0;
  for (int i = 0; i < kSixteenBitPatterns; ++i) {
    const auto bits = static_cast<uint16_t>(i);
    const uint32_t bf = std::bit_cast<uint32_t>(Bfloat16::value(bits)),
                   h = std::bit_cast<uint32_t>(Float16::value(bits));
    // bfloat16 -> float is a shift, NaN payload and all; a float16 NaN is compared as NaN: CUDA
    // gives float's canonical NaN (the case above), core/half.h keeps sign and payload.
    const bool h_nan = is_nan_bits<Float16>(bits);
    const auto same_h = [&](uint32_t g) { return h_nan ? std::isnan(std::bit_cast<float>(g)) : g == h; };
    const bool ok = got[static_cast<size_t>(i)] == bf && got[static_cast<size_t>(kSixteenBitPatterns + i)] == bf &&
                    same_h(got[static_cast<size_t>(2 * kSixteenBitPatterns + i)]) &&
                    same_h(got[static_cast<size_t>(3 * kSixteenBitPatterns + i)]);
    if (!ok && mismatches++ < 8) UNSCOPED_INFO("pattern " << hex(bits));
  }
  CHECK(mismatches == 0);
}

TEST_CASE("paired conversions put .x in the low half and convert each half like the scalar ones", "[cuda][half]") {
  start_on_device_zero();
  std::vector<float> inputs = edge_floats();
  const std::vector<float> random = random_floats(2);
  inputs.insert(inputs.end(), random.begin(), random.begin() + 20000);
  if (inputs.size() % 2 != 0) inputs.push_back(1.0f);
  const int m = static_cast<int>(inputs.size() / 2);
  const DeviceArray<float> in(inputs);
  const DeviceArray<__nv_bfloat162> bf(static_cast<size_t>(kPairRows) * m);
  const DeviceArray<__half2> h(static_cast<size_t>(kPairRows) * m);
  const DeviceArray<float> back(static_cast<size_t>(kPairFloatRows) * m);
  const DeviceArray<unsigned short> parts(static_cast<size_t>(kPairPartRows) * m);
  launch(pair_kernel, blocks_for(m), kThreads, in.get(), m, bf.get(), h.get(), back.get(), parts.get());
  const std::vector<uint32_t> bf_words = bf.read<uint32_t>(), h_words = h.read<uint32_t>();
  const std::vector<uint32_t> back_bits = back.read<uint32_t>();
  const std::vector<unsigned short> part_bits = parts.read();
  // CUDA's NaN is 0x7FFF, core/half.h's another NaN: NaN is compared as NaN.
  BitMismatches pairs("bfloat16 and half pairs, low and high halves"), floats("pairs back to float"),
      members("the pairs' members and __low2* / __high2*");
  for (int i = 0; i < m; ++i) {
    const float a = inputs[2 * static_cast<size_t>(i)], b = inputs[2 * static_cast<size_t>(i) + 1];
    const std::string input = float_input(a) + ", " + float_input(b);
    for (int row = 0; row < kPairRows; ++row) {
      const float y = row == 4 ? a : b;  // __float2*2_rn(a) puts a in both halves
      const uint32_t bw = bf_words[static_cast<size_t>(row) * m + i], hw = h_words[static_cast<size_t>(row) * m + i];
      pairs.check<Bfloat16>(static_cast<uint16_t>(bw), Bfloat16::round(a),
                            input + " bf16 low, row " + std::to_string(row), true);
      pairs.check<Bfloat16>(static_cast<uint16_t>(bw >> 16), Bfloat16::round(y),
                            input + " bf16 high, row " + std::to_string(row), true);
      pairs.check<Float16>(static_cast<uint16_t>(hw), Float16::round(a),
                           input + " half low, row " + std::to_string(row), true);
      pairs.check<Float16>(static_cast<uint16_t>(hw >> 16), Float16::round(y),
                           input + " half high, row " + std::to_string(row), true);
    }
    // Back to float: the bits of the value of the pair's halves (any NaN for a NaN).
    const uint16_t bf_low = static_cast<uint16_t>(bf_words[static_cast<size_t>(i)]),
                   bf_high = static_cast<uint16_t>(bf_words[static_cast<size_t>(i)] >> 16);
    const uint16_t h_low = static_cast<uint16_t>(h_words[static_cast<size_t>(i)]),
                   h_high = static_cast<uint16_t>(h_words[static_cast<size_t>(i)] >> 16);
    const float want_back[kPairFloatRows] = {Bfloat16::value(bf_low), Bfloat16::value(bf_high), Bfloat16::value(bf_low),
                                             Bfloat16::value(bf_high), Float16::value(h_low),   Float16::value(h_high),
                                             Float16::value(h_low),    Float16::value(h_high)};
    for (int row = 0; row < kPairFloatRows; ++row) {
      const uint32_t g = back_bits[static_cast<size_t>(row) * m + i], w = std::bit_cast<uint32_t>(want_back[row]);
      const bool same = std::isnan(want_back[row]) ? std::isnan(std::bit_cast<float>(g)) : g == w;
      if (!same) floats.add(input + " row " + std::to_string(row) + ": got " + hex(g) + ", want " + hex(w));
    }
    const uint16_t want_parts[kPairPartRows] = {bf_low, bf_high, bf_low, bf_high, h_low, h_high, h_low, h_high};
    for (int row = 0; row < kPairPartRows; ++row)
      members.check<Float16>(part_bits[static_cast<size_t>(row) * m + i], want_parts[row],
                             input + " row " + std::to_string(row), false);
  }
}

TEST_CASE("doubles and integers round once to the nearest bfloat16 and float16, not through float", "[cuda][half]") {
  start_on_device_zero();
  // Each value with a double rounding trap beside the plain ones: through float, 1 + 2^-11 + 2^-40
  // becomes the float16 tie 1 + 2^-11 and goes to 1, where the exact value goes up; likewise
  // 1 + 2^-8 + 2^-40 for bfloat16, the integer 2^24 + 2^16 + 1 for bfloat16 (float rounds it to
  // the tie 2^24 + 2^16) and 2^60 + 2^52 + 1 for bfloat16 (double rounds it to a tie).
  const double tiny = std::ldexp(1, -40);
  const std::vector<double> doubles = {
      0.0, -0.0, 1.0, -2.5, 0.1, 1e-300, -1e300, 65504.0, 65519.99, 65520.0, 3.0e38, 16842753.0, 2049.0, 2051.0,
      1 + std::ldexp(1, -11) + tiny, 1 + std::ldexp(1, -11), 1 + std::ldexp(1, -8) + tiny,
      -(1 + std::ldexp(1, -8) + tiny), std::ldexp(1, -24), std::ldexp(1, -25), std::ldexp(1, -25) + std::ldexp(1, -60),
      std::ldexp(1, -133), std::ldexp(1, -134) + std::ldexp(1, -200), std::ldexp(1.0, 128),
      std::ldexp(255.0, 120) + std::ldexp(1, 119), std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::quiet_NaN()};
  const std::vector<long long> longs = {0, 1, -1, 16842753, -16842753, 2049, 2051, 65519, 65520, -65536,
                                        (1LL << 60) + (1LL << 52) + 1, -((1LL << 60) + (1LL << 52) + 1),
                                        (1LL << 53) + 1, std::numeric_limits<long long>::max(),
                                        std::numeric_limits<long long>::min(), 123456789, -987654321, 33554431,
                                        1 << 24, (1 << 24) + 1, (1 << 24) + 3, 4095, 4097, 4099};
  std::vector<double> d(doubles);
  std::vector<long long> ll(longs);
  const size_t n = std::max(d.size(), ll.size());
  d.resize(n, 7.0);
  ll.resize(n, 7);
  std::vector<unsigned long long> ull(n);
  std::vector<int> i32(n);
  std::vector<unsigned> u32(n);
  for (size_t i = 0; i < n; ++i) {
    ull[i] = static_cast<unsigned long long>(ll[i]) * 3u;  // the negative ones wrap to large values: fine
    i32[i] = static_cast<int>(ll[i] % 2147483647);
    u32[i] = static_cast<unsigned>(ull[i] >> 20);
  }
  const int count = static_cast<int>(n);
  const DeviceArray<double> dd(d);
  const DeviceArray<long long> dll(ll);
  const DeviceArray<unsigned long long> dull(ull);
  const DeviceArray<int> di(i32);
  const DeviceArray<unsigned> du(u32);
  const DeviceArray<unsigned short> out(static_cast<size_t>(kWideRows) * n);
  launch(wide_to_16bit_kernel, blocks_for(count), kThreads, dd.get(), dll.get(), dull.get(),
         di.get(), du.get(), count, out.get());
  const std::vector<unsigned short> got = out.read();
  BitMismatches mismatches("doubles and integers to 16 bits");
  for (size_t i = 0; i < n; ++i) {
    const auto integer = [](__int128 v, auto format) { return round_exact<decltype(format)>(v, 0); };
    const uint16_t want_bf[5] = {round_double_exact<Bfloat16>(d[i]), integer(ll[i], Bfloat16{}),
                                 integer(static_cast<__int128>(ull[i]), Bfloat16{}), integer(i32[i], Bfloat16{}),
                                 integer(u32[i], Bfloat16{})};
    const uint16_t want_h[5] = {round_double_exact<Float16>(d[i]), integer(ll[i], Float16{}),
                                integer(static_cast<__int128>(ull[i]), Float16{}), integer(i32[i], Float16{}),
                                integer(u32[i], Float16{})};
    const std::string input = "double " + std::to_string(d[i]) + " / integer " + std::to_string(ll[i]) + " (row ";
    for (int k = 0; k < 10; ++k) {
      mismatches.check<Bfloat16>(got[static_cast<size_t>(k) * n + i], want_bf[k / 2], input + std::to_string(k) + ")",
                                 true);
      mismatches.check<Float16>(got[static_cast<size_t>(10 + k) * n + i], want_h[k / 2],
                                input + std::to_string(10 + k) + ")", true);
    }
  }
  // The traps themselves, spelled out.
  CHECK(round_double_exact<Float16>(1 + std::ldexp(1, -11) + std::ldexp(1, -40)) == 0x3c01);
  CHECK(round_double_exact<Bfloat16>(1 + std::ldexp(1, -8) + std::ldexp(1, -40)) == 0x3f81);
  CHECK(round_exact<Bfloat16>(16842753, 0) == 0x4b81);
  CHECK(Bfloat16::round(static_cast<float>(16842753)) == 0x4b80);  // what the detour through float gives
}

namespace {

// The reference of each arithmetic row for the patterns (a, b, c), NaN meaning "any NaN".
template <class F>
uint16_t arithmetic_reference(int row, uint16_t a, uint16_t b, uint16_t c, bool& checked) {
  checked = true;
  const auto op = [](float x, float y, char o) {
    const float r = o == '+' ? x + y : o == '-' ? x - y : o == '*' ? x * y : x / y;
    return F::round(r);  // float arithmetic rounded once: the correctly rounded result
  };
  const auto v = [](uint16_t bits) { return F::value(bits); };
  const auto fma = [&](uint16_t x, uint16_t y, uint16_t z) {
    uint16_t r = 0;
    checked = exact_fma<F>(x, y, z, r);
    return r;
  };
  const uint16_t one = F::round(1.0f);
  switch (row) {
    case kAdd: case kOpAdd: case kAdd2X: return op(v(a), v(b), '+');
    case kSub: case kOpSub: case kSub2X: return op(v(a), v(b), '-');
    case kMul: case kOpMul: case kMul2X: return op(v(a), v(b), '*');
    case kDiv: case kOpDiv: case kDiv2X: return op(v(a), v(b), '/');
    case kAdd2Y: return op(v(b), v(c), '+');
    case kSub2Y: return op(v(b), v(c), '-');
    case kMul2Y: return op(v(b), v(c), '*');
    case kDiv2Y: return op(v(b), v(c), '/');
    case kFma: case kFma2X: return fma(a, b, c);
    case kFma2Y: return fma(b, c, a);
    case kNeg: case kOpNeg: case kNeg2X: return static_cast<uint16_t>(a ^ 0x8000);
    case kPairOpsX: return op(v(op(v(a), v(b), '*')), v(c), '+');
    case kPairOpsY: return op(v(op(v(b), v(c), '*')), v(a), '+');
    case kCompound: {
      const uint16_t t1 = op(v(a), v(b), '+'), t2 = op(v(t1), v(c), '*'), t3 = op(v(t2), v(a), '-');
      return op(v(t3), v(b), '/');
    }
    case kPreIncrement: case kPostIncrement: return op(v(a), v(one), '+');
    case kAfterIncrements: return op(v(op(v(a), v(one), '+')), v(one), '+');
    case kAfterDecrements: {
      const uint16_t up2 = op(v(op(v(a), v(one), '+')), v(one), '+');
      return op(v(op(v(up2), v(one), '-')), v(one), '-');
    }
    case kPairCompoundX: return op(v(op(v(a), v(b), '+')), v(c), '*');
    case kPairCompoundY: return op(v(op(v(b), v(c), '+')), v(a), '*');
    case kComparisons: {
      const float x = v(a), y = v(b);
      const bool ordered_ne = x < y || x > y;
      const bool bits[] = {x == y, ordered_ne, !(x == y), x < y, x <= y, x > y, x >= y, std::isnan(x),
                           x == y, !(x == y),  x < y,     x <= y, x > y, x >= y};
      unsigned mask = 0;
      for (int k = 0; k < 14; ++k) mask |= bits[k] ? 1u << k : 0u;
      return static_cast<uint16_t>(mask);
    }
    default: return 0;
  }
}

// Operands: every kind of pattern at random, operands near each other (so that sums cancel and
// fmas land on ties), and hand-made cases. For bfloat16 the exact fma reference holds operands
// within about 2^50 of each other: the near ones are within it.
template <class F>
void arithmetic_inputs(uint64_t seed, std::vector<uint16_t>& a, std::vector<uint16_t>& b, std::vector<uint16_t>& c) {
  std::mt19937_64 gen(seed);
  for (int i = 0; i < 8000; ++i) {
    a.push_back(static_cast<uint16_t>(gen()));
    b.push_back(static_cast<uint16_t>(gen()));
    c.push_back(static_cast<uint16_t>(gen()));
  }
  const int exponent_bits = 15 - F::kMantissaBits, bias = (1 << (exponent_bits - 1)) - 1;
  const int spread = F::kMantissaBits == 7 ? 20 : 12;
  for (int i = 0; i < 12000; ++i) {
    uint16_t v[3];
    for (uint16_t& x : v) {
      const int exponent = bias - spread / 2 + static_cast<int>(gen() % static_cast<uint64_t>(spread));
      x = static_cast<uint16_t>((gen() & 0x8000u) | (static_cast<unsigned>(exponent) << F::kMantissaBits) |
                                (gen() & ((1u << F::kMantissaBits) - 1)));
    }
    a.push_back(v[0]);
    b.push_back(v[1]);
    c.push_back(v[2]);
  }
}

template <class F, class T, class T2>
void check_arithmetic(uint64_t seed, const std::vector<uint16_t>& extra_a, const std::vector<uint16_t>& extra_b,
                      const std::vector<uint16_t>& extra_c) {
  std::vector<uint16_t> a(extra_a), b(extra_b), c(extra_c);
  arithmetic_inputs<F>(seed, a, b, c);
  const int n = static_cast<int>(a.size());
  const DeviceArray<unsigned short> da(a), db(b), dc(c);
  const DeviceArray<unsigned short> out(static_cast<size_t>(kArithmeticRows) * n);
  launch(arithmetic_kernel<T, T2>, blocks_for(n), kThreads, da.get(), db.get(), dc.get(), n, out.get());
  const std::vector<unsigned short> got = out.read();
  long fma_checked = 0, fma_rows = 0;
  for (int row = 0; row < kArithmeticRows; ++row) {
    BitMismatches mismatches(std::string(F::kName) + " " + kArithmeticRowNames[row]);
    for (int i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      bool checked = true;
      const uint16_t want = arithmetic_reference<F>(row, a[k], b[k], c[k], checked);
      if (row == kFma) fma_rows++, fma_checked += checked;
      if (!checked) continue;  // an fma whose exact value this reference cannot hold (counted below)
      const std::string input = "a " + hex(a[k]) + ", b " + hex(b[k]) + ", c " + hex(c[k]);
      const uint16_t g = got[static_cast<size_t>(row) * n + k];
      if (row == kComparisons) {  // a bit per comparison
        std::string differing;
        for (int bit = 0; bit < 14; ++bit)
          if (((g ^ want) >> bit) & 1) differing += std::string(" ") + kComparisonNames[bit];
        if (!differing.empty()) mismatches.add(input + ":" + differing);
        continue;
      }
      // A NaN result is any NaN: CUDA's arithmetic gives its canonical one, core/half.h another.
      mismatches.check<F>(g, want, input, true);
    }
  }
  INFO("fma cases checked against the exact value: " << fma_checked << " of " << fma_rows);
  CHECK(fma_checked * 10 >= fma_rows * 6);  // every hand-made and near case, and the random ones that fit
}

}  // namespace

TEST_CASE("float16 arithmetic, 2-wide arithmetic and comparisons on the device are correctly rounded", "[cuda][half]") {
  start_on_device_zero();
  // fma's double rounding trap: a·b = 2^-11 - 2^-31 and c = 1 + 2^-10 make 1 + 2^-10 + 2^-11 - 2^-31,
  // which rounds down to 0x3C01; float's fma gives the tie 1 + 2^-10 + 2^-11 and goes up to even.
  // Then overflow of a sum and of a product, Inf - Inf, 0 · Inf, signed zeros, subnormal results
  // (2^-24 · 0.5 is the tie to 0), NaN.
  const std::vector<uint16_t> a = {0x1001, 0x7bff, 0x7bff, 0x7c00, 0x0000, 0x8000,
                                   0x0001, 0x0400, 0x7e00, 0x3c00, 0x8000};
  const std::vector<uint16_t> b = {0x3bfe, 0x7bff, 0x4000, 0xfc00, 0x7c00, 0x0000,
                                   0x3800, 0x0001, 0x3c00, 0xbc00, 0x8000};
  const std::vector<uint16_t> c = {0x3c01, 0x0000, 0xfbff, 0x3c00, 0x3c00, 0x8000,
                                   0x0001, 0x8400, 0x3c00, 0x3c00, 0x8000};
  uint16_t trap = 0;
  REQUIRE(exact_fma<Float16>(0x1001, 0x3bfe, 0x3c01, trap));
  CHECK(trap == 0x3c01);
  CHECK(Float16::round(std::fma(Float16::value(0x1001), Float16::value(0x3bfe), Float16::value(0x3c01))) == 0x3c02);
  check_arithmetic<Float16, __half, __half2>(3, a, b, c);
}

TEST_CASE("bfloat16 arithmetic, 2-wide arithmetic and comparisons on the device are correctly rounded",
          "[cuda][half]") {
  start_on_device_zero();
  // Overflow, Inf - Inf, 0 · Inf, signed zeros, subnormal results (bfloat16's are float's), NaN,
  // and fma ties: 2^-8 + 1 and 2^-8 + (1 + 2^-7) go to even (down, then up), (1 + 2^-7)·2^-8 + 1
  // lies 2^-15 above the tie and goes up.
  const std::vector<uint16_t> a = {0x7f7f, 0x7f7f, 0x7f80, 0x0000, 0x8000, 0x0001,
                                   0x0080, 0x7fc0, 0x3b80, 0x3b80, 0x3b81, 0x3f80};
  const std::vector<uint16_t> b = {0x7f7f, 0x4000, 0xff80, 0x7f80, 0x0000, 0x3f00,
                                   0x0001, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0xbf80};
  const std::vector<uint16_t> c = {0x0000, 0xff7f, 0x3f80, 0x3f80, 0x8000, 0x0001,
                                   0x8080, 0x3f80, 0x3f80, 0x3f81, 0x3f80, 0x3f80};
  for (const auto& [x, y, z, want] :
       {std::tuple<uint16_t, uint16_t, uint16_t, uint16_t>{0x3b80, 0x3f80, 0x3f80, 0x3f80},
        {0x3b80, 0x3f80, 0x3f81, 0x3f82},
        {0x3b81, 0x3f80, 0x3f80, 0x3f81}}) {
    uint16_t exact = 0;
    REQUIRE(exact_fma<Bfloat16>(x, y, z, exact));
    CHECK(hex(exact) == hex(want));
  }
  check_arithmetic<Bfloat16, __nv_bfloat16, __nv_bfloat162>(4, a, b, c);
}

TEST_CASE("warp shuffles move __half2 and __nv_bfloat162 as one 32-bit value", "[cuda][half]") {
  start_on_device_zero();
  const DeviceArray<unsigned short> out(static_cast<size_t>(kShuffleRows) * 32);
  launch(pair_shuffle_kernel, 1, 32, out.get());
  const std::vector<unsigned short> got = out.read();
  const auto h = [](int v) { return Float16::round(static_cast<float>(v)); };
  const auto bf = [](int v) { return Bfloat16::round(static_cast<float>(v)); };
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    const int down = lane + 1 < 32 ? lane + 1 : lane, up = lane >= 2 ? lane - 2 : lane;  // out of range: own value
    const uint16_t want[kShuffleRows] = {h(lane ^ 1), h(100 + (lane ^ 1)), h(down), h(100 + down), h(up), h(100 + up),
                                         bf(5),       bf(105),             h(lane ^ 3), bf(lane)};
    for (int k = 0; k < kShuffleRows; ++k) CHECK(hex(got[static_cast<size_t>(k) * 32 + lane]) == hex(want[k]));
  }
}

#if defined(MINIDL_CUDA_SIM) && !defined(__SANITIZE_ADDRESS__)
// On the GPU a misaligned 4-byte load is a fault that loses the context, so only the simulated
// device runs this; under AddressSanitizer + UBSan, UBSan stops the process at the misaligned
// reference first (as for float4 in test_sim_device.cpp).
namespace {
__global__ void misaligned_half2_load_kernel(const __half* p, unsigned short* out) {
  const __half2 v = *reinterpret_cast<const __half2*>(p);
  *out = __half_as_ushort(v.x);
}
}  // namespace

TEST_CASE("sim: a __half2 loaded from a 2-byte aligned address is a misaligned-address fault, as on the GPU",
          "[cuda][half][sim]") {
  start_on_device_zero();
  {
    const DeviceArray<__half> values(8);
    const DeviceArray<unsigned short> out(1);
    ::cudasim_launch_at(__FILE__, __LINE__, misaligned_half2_load_kernel, dim3(1), dim3(1), 0, nullptr,
                        static_cast<const __half*>(values.get() + 1), out.get());
    CHECK(cudaDeviceSynchronize() == cudaErrorMisalignedAddress);
    CHECK(cudaDeviceReset() == cudaSuccess);
  }
  (void)cudaGetLastError();
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}
#endif

#endif  // defined(MINIDL_CUDA_SIM) || defined(__CUDACC__)
