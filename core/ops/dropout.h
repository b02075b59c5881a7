// dropout (inverted), as torch.nn.functional.dropout.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

// training: each element is kept with probability 1 − p and scaled by 1/(1 − p), or zeroed;
// the mask comes from `gen` (the default generator when null) through Philox, so the same
// generator state gives the same mask on every device. Evaluation, or p = 0: x itself.
// p must lie in [0, 1]. Gradient: dy times the same mask.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

}  // namespace minidl::ops
