// The 16-bit floating types on the device: how a CUDA kernel names, reads and writes bfloat16 and
// float16 elements. Include only from .cu files.
//
// A 16-bit kernel stores 16 bits and computes in float32 (docs/mixed-precision.md): it widens
// each element it loads (to_float, exact), does all its math and accumulation in float, and rounds
// once where it stores (from_float, round to nearest even: __float2bfloat16 / __float2half). The
// element types are CUDA's own (__nv_bfloat16, __half from cuda_bf16.h / cuda_fp16.h), so the
// same source builds with nvcc and on the simulated device (cudasim/include); a kernel templated
// on its element type T takes float, __nv_bfloat16 or __half, and load/store through these
// helpers makes float32 the T = float case of the same code.
//
// Rounding is bit-identical to core/half.h's (the host casts) for every non-NaN value; a NaN
// becomes CUDA's canonical NaN 0x7FFF where core/half.h writes 0x7FC0 (bfloat16) or 0x7E00
// (float16): still a NaN, and nothing compares NaN bits.
//
// Vectorised access (Note [16-bit vectors]): a uint4 is 16 bytes, 8 elements of 2 bytes; unpack8
// / pack8 move them between a uint4 and 8 floats, element 0 in the low half of .x (little-endian
// memory order, as a real load gives it). vec4_t<T> is 4 elements of T in one load or store (a
// float4 of float32, a uint2 of 16-bit elements, as the GEMM moves them); unpack4 / pack4 likewise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace minidl::cuda {

template <typename T>
inline constexpr bool is_half_type_v = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// ---- one element ----
__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ inline T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(v);
  else if constexpr (std::is_same_v<T, __half>) return __float2half(v);
  else return v;
}

// The 16 bits of a 16-bit element, and back (for the vector packing and for the host).
__device__ inline unsigned short bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ inline unsigned short bits_of(__half v) { return __half_as_ushort(v); }
template <typename T>
__device__ inline T from_bits(unsigned short b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __ushort_as_bfloat16(b);
  else return __ushort_as_half(b);
}

// ---- eight elements in a uint4 (Note [16-bit vectors]) ----
template <typename T>
__device__ inline void unpack8(const uint4& v, float (&f)[8]) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = to_float(from_bits<T>(static_cast<unsigned short>(w[j] & 0xffffu)));
    f[2 * j + 1] = to_float(from_bits<T>(static_cast<unsigned short>(w[j] >> 16)));
  }
}

template <typename T>
__device__ inline uint4 pack8(const float (&f)[8]) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    w[j] = static_cast<unsigned>(bits_of(from_float<T>(f[2 * j]))) |
           (static_cast<unsigned>(bits_of(from_float<T>(f[2 * j + 1]))) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// ---- four elements of T in one vector (Note [16-bit vectors]) ----
// 16 bytes of float32 or 8 bytes of a 16-bit type: aligned to its size when loaded or stored.
template <typename T>
using vec4_t = std::conditional_t<is_half_type_v<T>, uint2, float4>;

template <typename T>
__device__ inline void unpack4(const vec4_t<T>& v, float (&f)[4]) {
  if constexpr (is_half_type_v<T>) {
    const unsigned w[2] = {v.x, v.y};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      f[2 * j] = to_float(from_bits<T>(static_cast<unsigned short>(w[j] & 0xffffu)));
      f[2 * j + 1] = to_float(from_bits<T>(static_cast<unsigned short>(w[j] >> 16)));
    }
  } else {
    f[0] = v.x;
    f[1] = v.y;
    f[2] = v.z;
    f[3] = v.w;
  }
}

template <typename T>
__device__ inline vec4_t<T> pack4(const float (&f)[4]) {
  if constexpr (is_half_type_v<T>) {
    unsigned w[2];
#pragma unroll
    for (int j = 0; j < 2; ++j)
      w[j] = static_cast<unsigned>(bits_of(from_float<T>(f[2 * j]))) |
             (static_cast<unsigned>(bits_of(from_float<T>(f[2 * j + 1]))) << 16);
    return make_uint2(w[0], w[1]);
  } else {
    return make_float4(f[0], f[1], f[2], f[3]);
  }
}

// ---- dtype -> element type, on the host ----
// f(T{}) with T the device element type of a floating dtype a kernel computes in: float for
// float32, __nv_bfloat16 for bfloat16, __half for float16. Other dtypes never reach a caller
// (the op layer asks computes_in first), which the assert restates.
template <typename F>
void dispatch_float_and_half(DType dtype, F&& f) {
  switch (dtype) {
    case DType::BFloat16: f(__nv_bfloat16{}); break;
    case DType::Float16: f(__half{}); break;
    default:
      MINIDL_INTERNAL_ASSERT(dtype == DType::Float32, "a CUDA kernel for ", dtype);
      f(float{});
  }
}

}  // namespace minidl::cuda
