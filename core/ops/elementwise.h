// Elementwise ops with broadcasting (NumPy rules), ReLU and equality.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor relu(const Tensor& x);
// 1.0 where a == b (after broadcasting), else 0.0, as float32; no gradient.
Tensor eq(const Tensor& a, const Tensor& b);

}  // namespace minidl::ops
