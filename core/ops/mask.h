// Masks for attention: tril/triu (the causal mask's triangle) and masked_fill.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

// The lower (tril) or upper (triu) triangle of the last two dims of x [..., R, C] (at least
// 2-D), the rest set to 0, as torch.tril/triu: element (r, c) is kept when c − r <= diagonal
// (tril) or c − r >= diagonal (triu); diagonal 0 is the main diagonal, > 0 above it, < 0 below.
// Differentiable in x: the gradient is the same triangle of the output's gradient.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// y = x with `value` wherever mask is true, as torch.masked_fill. minidl has no bool dtype: the
// mask is any tensor whose nonzero elements mean true — the float32 0/1 tensors of ops::eq, or
// float64 or int64 ones — broadcastable to x's shape (x's shape is the result's). A broadcast
// mask is read in place through its strides, never expanded in memory. Differentiable in x (the
// gradient is 0 where the value was filled in); the mask gets no gradient.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace minidl::ops
