// layer_norm over the last dim, as torch.nn.functional.layer_norm(x, [D], weight, bias, eps).
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

// x [..., D] float32 or float64 (rank >= 1). Each row x[..., :] is normalised by its own mean
// and biased variance: y = (x − mean)/sqrt(var + eps)·weight + bias, with eps inside the square
// root. weight and bias [D] (x's dtype and device) may each be undefined (1 and 0: PyTorch's
// elementwise_affine=False leaves both out). eps >= 0. Gradients flow to x, weight and bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace minidl::ops
