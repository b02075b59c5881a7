// nn::BatchNorm2d: parameters and buffers, and a forward that picks batch or running
// statistics from the training flag (ops::batch_norm does the math and the running update).
#include "nn/batch_norm.h"

#include <typeinfo>

#include "core/autograd.h"
#include "core/ops/batch_norm.h"

namespace minidl::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNormOptions options)
    : num_features_(num_features), options_(options) {
  MINIDL_CHECK(num_features > 0, "BatchNorm2d: num_features must be positive, got ", num_features);
  if (options.affine) {
    weight = register_parameter("weight", ones(Shape{num_features}));
    bias = register_parameter("bias", zeros(Shape{num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros(Shape{num_features}));
    running_var = register_buffer("running_var", ones(Shape{num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros(Shape{}, DType::Int64));
  }
}

std::string BatchNorm2d::name() const {
  return detail::make_message("BatchNorm2d(", num_features_, ", eps=", options_.eps, ", momentum=", options_.momentum,
                              ", affine=", options_.affine ? "true" : "false",
                              ", track_running_stats=", options_.track_running_stats ? "true" : "false", ")");
}

std::shared_ptr<Module> BatchNorm2d::clone() const {
  check_clone_is_exact(typeid(BatchNorm2d), "BatchNorm2d");
  auto copy = std::make_shared<BatchNorm2d>(num_features_, options_);
  copy->copy_state_from(*this);
  return copy;
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  check_defined(x, "BatchNorm2d", "x");
  MINIDL_CHECK(x.dim() == 4 && x.shape()[1] == num_features_, name(), ": expected input [N, ", num_features_,
               ", H, W], got shape ", x.shape());
  const bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    // Counted as PyTorch does (it matters there only for momentum=None). item() reads the
    // device value: the buffer may have been loaded from a checkpoint since the last step.
    NoGradGuard no_grad;
    num_batches_tracked.fill_(num_batches_tracked.item() + 1);
  }
  // Evaluation with running statistics; training updates them only when tracked.
  return ops::batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, options_.momentum, options_.eps);
}

}  // namespace minidl::nn
