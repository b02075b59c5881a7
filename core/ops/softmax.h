// log_softmax / softmax along the last dim, and the fused softmax-cross-entropy loss.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

enum class Reduction { Mean, Sum, None };

Tensor log_softmax(const Tensor& x, int64_t dim = -1);
Tensor softmax(const Tensor& x, int64_t dim = -1);
// How the gradient of softmax_cross_entropy is produced when the logits need one.
//   Fused:    forward writes loss and dlogits in one pass over the logits (the training path);
//             backward only rescales them when the upstream gradient is not the implicit 1.
//   Separate: forward keeps each row's max and 1/Σ exp(x - max); backward recomputes softmax
//             from the logits with them.
enum class CrossEntropyGrad { Fused, Separate };

// torch.nn.functional.cross_entropy's ignore_index and label_smoothing.
//   ignore_index: a row whose target equals it adds 0 to the loss and gets 0 gradient, and is not
//                 counted by the mean (which is NaN when every row is ignored); it may lie outside [0, C).
//   label_smoothing ε in [0, 1]: the target distribution is (1 - ε)·onehot(t) + ε/C, so a row's loss
//                 is (1 - ε)·(-log p_t) + ε·(mean over classes of -log p_j).
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// logits [N, C] float, targets [N] int64 in [0, C) or equal to ignore_index -> mean/sum scalar, or [N]
// for None. The mean divides by the number of rows not ignored.
Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::Mean,
                             CrossEntropyGrad grad_mode = CrossEntropyGrad::Fused,
                             const CrossEntropyOptions& options = {});

}  // namespace minidl::ops
