// DType: the element types minidl stores. float32 everywhere, float64 on the CPU (so that
// gradients can be checked against finite differences), int64 for class labels, and the two
// 16-bit floating formats of mixed-precision training, bfloat16 and float16 (core/half.h draws
// them bit by bit; docs/mixed-precision.md says when each is used).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "core/half.h"

namespace minidl {

enum class DType : uint8_t { Float32, Float64, Int64, BFloat16, Float16 };

// Every dtype, for loops over them (messages, tests).
inline constexpr DType all_dtypes[] = {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16, DType::Float16};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}

constexpr bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }
constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64 || is_half(t); }

// The dtype an op computes and accumulates in for inputs of dtype t (float32 for the 16-bit
// formats, whose statistics — a softmax's log-sum-exp, a norm's mean and rstd — are kept in it).
constexpr DType compute_dtype(DType t) { return is_half(t) ? DType::Float32 : t; }

// The dtype two floating dtypes combine into (PyTorch's type promotion): the wider one, float32
// for a bfloat16 with a float16 (neither holds the other's values).
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType, used by the templated kernels and by Tensor::data<T>().
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float16> { static constexpr DType value = DType::Float16; };
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace minidl
