// nn losses: CrossEntropyLoss (fused softmax + negative log-likelihood, one kernel) and
// MSELoss. Callable objects, not Modules: they hold no parameters.
#pragma once

#include "core/ops/softmax.h"
#include "core/tensor.h"

namespace minidl::nn {

class CrossEntropyLoss {
 public:
  // options: ignore_index (default -100) and label_smoothing (default 0), as in
  // torch.nn.CrossEntropyLoss (ops::CrossEntropyOptions).
  explicit CrossEntropyLoss(ops::Reduction r = ops::Reduction::Mean, ops::CrossEntropyOptions options = {})
      : reduction_(r), options_(options) {}
  // logits [N, C] float, targets [N] int64 in [0, C) or equal to ignore_index.
  Tensor operator()(const Tensor& logits, const Tensor& targets) const;
  ops::Reduction reduction() const { return reduction_; }
  const ops::CrossEntropyOptions& options() const { return options_; }

 private:
  ops::Reduction reduction_;
  ops::CrossEntropyOptions options_;
};

class MSELoss {
 public:
  explicit MSELoss(ops::Reduction r = ops::Reduction::Mean) : reduction_(r) {}
  // mean (or sum, or elementwise) of (input - target)²; shapes must be equal.
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  ops::Reduction reduction() const { return reduction_; }

 private:
  ops::Reduction reduction_;
};

}  // namespace minidl::nn
