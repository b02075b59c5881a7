// nn losses, forwarding to nn::functional.
#include "nn/loss.h"

#include "nn/functional.h"

namespace minidl::nn {

Tensor CrossEntropyLoss::operator()(const Tensor& logits, const Tensor& targets) const {
  return functional::cross_entropy(logits, targets, reduction_, options_);
}

Tensor MSELoss::operator()(const Tensor& input, const Tensor& target) const {
  return functional::mse_loss(input, target, reduction_);
}

}  // namespace minidl::nn
