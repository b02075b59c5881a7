// Gradient clipping by the total norm of all gradients (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace minidl::nn {

// Scales the gradients of params in place so that their total norm (the p-norm of all their
// elements together, p = norm_type > 0 or +inf for the max |g|) is at most max_norm: every
// gradient is multiplied by min(max_norm / (total + 1e-6), 1). Returns the total norm before
// clipping, a 0-dim tensor of the gradients' dtype on their device. Parameters without a gradient
// are skipped; with none at all the norm is a float32 0 on the CPU. The gradients must share one
// device and one dtype and be contiguous. On CUDA the norm and the coefficient stay on the device:
// two kernel launches, and the host never waits (read the returned norm with item() when needed).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

}  // namespace minidl::nn
