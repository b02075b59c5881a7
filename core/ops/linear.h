// matmul (2-D) and linear(x, W, b) = x·Wᵀ + b as one op (bias fused into the GEMM).
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

// a [M, K] · b [K, N] -> [M, N]
Tensor matmul(const Tensor& a, const Tensor& b);
// x [N, K], w [M, K], b [M] (may be undefined) -> [N, M]; relu=true fuses max(0, ·).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), bool relu = false);

}  // namespace minidl::ops
