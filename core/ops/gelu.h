// gelu: the Gaussian error linear unit, as torch.nn.functional.gelu(x, approximate=...).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace minidl {

// GELU's two forms, PyTorch's approximate="none" and approximate="tanh":
//   None: gelu(x) = x·Φ(x) = 0.5·x·(1 + erf(x/√2))
//   Tanh: gelu(x) ≈ 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
enum class GeluApproximate : uint8_t { None, Tanh };

// "none" or "tanh": the form's name as PyTorch spells it.
const char* gelu_approximate_name(GeluApproximate approximate);
// The form named "none" or "tanh"; anything else is an Error naming the string.
GeluApproximate gelu_approximate_from_name(const std::string& name);

}  // namespace minidl

namespace minidl::ops {

// x float32 or float64, any shape -> the same shape. Differentiable.
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);

}  // namespace minidl::ops
