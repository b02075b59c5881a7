// log_softmax / softmax along the last dim, and the fused softmax-cross-entropy loss.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

enum class Reduction { Mean, Sum, None };

Tensor log_softmax(const Tensor& x, int64_t dim = -1);
Tensor softmax(const Tensor& x, int64_t dim = -1);
// logits [N, C] float, targets [N] int64 in [0, C) -> mean/sum scalar, or [N] for None.
// How the gradient of softmax_cross_entropy is produced when the logits need one.
//   Fused:    forward writes loss and dlogits in one pass over the logits (the training path);
//             backward only rescales them when the upstream gradient is not the implicit 1.
//   Separate: forward keeps each row's max and 1/Σ exp(x - max); backward recomputes softmax
//             from the logits with them.
enum class CrossEntropyGrad { Fused, Separate };
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::Mean,
                             CrossEntropyGrad grad_mode = CrossEntropyGrad::Fused);

}  // namespace minidl::ops
