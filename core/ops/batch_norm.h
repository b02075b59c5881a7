// batch_norm over [N, C, ...] tensors (BatchNorm1d/2d's math), as torch.nn.functional.batch_norm.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

// x [N, C] or [N, C, H, W] (any rank >= 2; statistics per channel over every other dim).
// training: normalises with the batch mean and biased variance, and, when running_mean and
//   running_var are defined, updates them in place (outside autograd):
//   running = (1 − momentum)·running + momentum·batch_stat (unbiased variance for running_var);
// evaluation: normalises with running_mean and running_var (both required).
// weight (γ) and bias (β) [C] may be undefined (1 and 0). Gradients flow to x, weight, bias.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace minidl::ops
