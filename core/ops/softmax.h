// log_softmax / softmax along the last dim, and the fused softmax-cross-entropy loss.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

enum class Reduction { Mean, Sum, None };

Tensor log_softmax(const Tensor& x, int64_t dim = -1);
Tensor softmax(const Tensor& x, int64_t dim = -1);
// logits [N, C] float, targets [N] int64 in [0, C) -> mean/sum scalar, or [N] for None.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::Mean);

}  // namespace minidl::ops
