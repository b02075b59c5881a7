// DType: the element types minidl stores. float32 everywhere, float64 on the CPU (so that
// gradients can be checked against finite differences), int64 for class labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace minidl {

enum class DType : uint8_t { Float32, Float64, Int64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// C++ type <-> DType, used by the templated kernels and by Tensor::data<T>().
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace minidl
