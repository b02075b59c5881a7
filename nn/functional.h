// nn::functional: the stateless forms of the layers and losses (torch.nn.functional).
#pragma once

#include "core/ops/gelu.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"

namespace minidl::nn::functional {

Tensor relu(const Tensor& x);
// x [..., in] · wᵀ + b with w [out, in], b [out] (optional) -> [..., out]; leading dims of
// any rank >= 1 are flattened into one batch dim for the GEMM and restored afterwards.
// ops::linear: a wrong shape throws its error, naming linear, x's shape and weight's shape.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});
// relu(linear(x, w, b)) with the relu fused into the GEMM epilogue (same values, one kernel).
Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& b = {});
// gelu(linear(x, w, b), approximate) with the GELU fused into the GEMM epilogue (ops::linear_gelu).
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b = {},
                   GeluApproximate approximate = GeluApproximate::None);
// ignore_index and label_smoothing as in torch.nn.functional.cross_entropy (ops::CrossEntropyOptions).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, ops::Reduction r = ops::Reduction::Mean,
                     const ops::CrossEntropyOptions& options = {});
// (input - target)² reduced; shapes must be equal (no broadcasting).
Tensor mse_loss(const Tensor& input, const Tensor& target, ops::Reduction r = ops::Reduction::Mean);

}  // namespace minidl::nn::functional
