// matmul (torch.matmul's shapes) and linear(x, W, b) = x·Wᵀ + b as one op (bias fused into the GEMM).
#pragma once

#include "core/ops/gelu.h"
#include "core/tensor.h"

namespace minidl::ops {

// a [..., M, K] · b [..., K, N] -> [..., M, N], as torch.matmul: the batch dims (all but the
// last two) broadcast against each other; a 1-D a [K] is a row [1, K] and a 1-D b [K] a column
// [K, 1], and that dim is dropped from the result ([K]·[K] -> a 0-dim scalar). Transposed views
// of the last two dims (k.transpose(-2, -1)) are read in place, without a copy.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., K], w [M, K], b [M] (may be undefined) -> [..., M]; relu=true fuses max(0, ·).
// Every argument is checked here, once, for nn::Linear and nn::functional::linear too: a
// wrong shape or dtype throws minidl::Error naming linear, x's shape and weight's shape.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), bool relu = false);
// gelu(linear(x, w, b), approximate) with the GELU in the GEMM's epilogue: the same values (and,
// in float32 and 16 bits, the same bits) as the two ops, without a second pass over the
// pre-activation. Same checks and messages as linear, naming linear_gelu.
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                   GeluApproximate approximate = GeluApproximate::None);

}  // namespace minidl::ops
