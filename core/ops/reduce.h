// Reductions: sum and mean (all elements, or along one dim), sum_to (the broadcast
// adjoint), argmax. Fixed summation order, so results are deterministic.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums x down to `shape` (which x's shape broadcasts from): the gradient of expand.
Tensor sum_to(const Tensor& x, const Shape& shape);
// Index of the maximum along dim, int64, dim removed; no gradient.
Tensor argmax(const Tensor& x, int64_t dim = -1);

}  // namespace minidl::ops
