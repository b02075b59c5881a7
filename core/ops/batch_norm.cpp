// batch_norm and its gradient (formulas in kernels/cpu/batch_norm.cpp). In training the
// normalising statistics are functions of the batch, so the gradient carries the extra terms
// through the mean and variance; in evaluation they are constants.
#include "core/ops/batch_norm.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct BatchNormBackward final : Node {
  Tensor x, weight, save_mean, save_invstd;
  bool training = true, has_weight = false, has_bias = false;
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor dy = g.contiguous();
    Tensor dx = next_edges[0].valid() ? empty(x.shape(), x.options()) : Tensor();
    Tensor dw = has_weight && next_edges[1].valid() ? empty(save_mean.shape(), x.options()) : Tensor();
    Tensor db = has_bias && next_edges[2].valid() ? empty(save_mean.shape(), x.options()) : Tensor();
    backend_for(x.device()).batch_norm_backward(dy, x, weight, save_mean, save_invstd, training, dx, dw, db);
    return {dx, dw, db};
  }
  void release_saved() override { x = weight = save_mean = save_invstd = Tensor(); }
  std::string name() const override { return "BatchNormBackward"; }
};

void check_channel_vector(const Tensor& t, const char* what, const Tensor& x, int64_t channels) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.dim() == 1 && t.shape()[0] == channels, "batch_norm: ", what, " has shape ", t.shape(),
               ", expected [", channels, "] for x ", x.shape(), " (one value per channel, dim 1)");
  MINIDL_CHECK(t.dtype() == x.dtype(), "batch_norm: ", what, " is ", t.dtype(), " but x is ", x.dtype());
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  // Only x can be 16-bit here (the weights and running statistics are float32 buffers).
  if (auto cast = autocast::cast_inputs("batch_norm", {&x}))
    return batch_norm((*cast)[0], running_mean, running_var, weight, bias, training, momentum, eps);
  profiler::RecordScope profile_scope("batch_norm", profiler::Kind::Op, {&x, &running_mean, &running_var, &weight, &bias});
  check_defined(x, "batch_norm", "x");
  check_same_device({&x, &running_mean, &running_var, &weight, &bias}, "batch_norm");
  MINIDL_CHECK(is_floating(x.dtype()), "batch_norm: x must be a floating dtype (float32, float64, bfloat16, float16), got ", x.dtype(), " with shape ",
               x.shape());
  check_backend_computes(x, "batch_norm", "x");
  MINIDL_CHECK(x.dim() >= 2, "batch_norm: expected x of rank >= 2 [N, C, ...], got shape ", x.shape());
  const int64_t channels = x.shape()[1];
  check_channel_vector(running_mean, "running_mean", x, channels);
  check_channel_vector(running_var, "running_var", x, channels);
  check_channel_vector(weight, "weight", x, channels);
  check_channel_vector(bias, "bias", x, channels);
  MINIDL_CHECK(running_mean.defined() == running_var.defined(), "batch_norm: running_mean and running_var must be "
               "given together (x ", x.shape(), ")");
  MINIDL_CHECK(training || running_mean.defined(), "batch_norm: evaluation mode needs running_mean and running_var "
               "(x ", x.shape(), ")");
  MINIDL_CHECK(!running_mean.defined() || (running_mean.is_contiguous() && running_var.is_contiguous()),
               "batch_norm: running_mean and running_var must be contiguous (they are updated in place)");
  MINIDL_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "batch_norm: expected eps > 0 and momentum in [0, 1], got eps ",
               eps, " and momentum ", momentum);
  const int64_t per_channel = channels == 0 ? 0 : x.numel() / channels;
  MINIDL_CHECK(!training || per_channel > 1, "batch_norm: training needs more than one value per channel to compute "
               "a variance, got x ", x.shape());
  const Tensor xc = x.detach().contiguous();
  const Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty(x.shape(), x.options());
  const TensorOptions stats_options = x.options().with_dtype(compute_dtype(x.dtype()));  // float32 for 16-bit x
  Tensor save_mean = empty(Shape{channels}, stats_options), save_invstd = empty(Shape{channels}, stats_options);
  Tensor rm = running_mean.defined() ? running_mean.detach() : Tensor();
  Tensor rv = running_var.defined() ? running_var.detach() : Tensor();
  // Run even when x is empty (only in evaluation: training was refused above without a variance
  // to take): the backend still writes save_mean and save_invstd from the running statistics,
  // which the backward reads. Left unwritten, its dγ = (Σ over nothing)·invstd = 0·garbage is
  // NaN when the fresh memory held NaN or inf; written, dγ = dβ = 0 as in PyTorch. Both backends
  // take an empty x (and no channel at all) without touching its data.
  backend_for(x.device()).batch_norm_forward(xc, wc, bc, rm, rv, training, momentum, eps, y, save_mean, save_invstd);
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<BatchNormBackward>();
    node->x = xc;
    node->weight = wc;
    node->save_mean = save_mean;
    node->save_invstd = save_invstd;
    node->training = training;
    node->has_weight = weight.defined();
    node->has_bias = bias.defined();
    autograd::attach(node, {&x, &weight, &bias}, y);
  }
  return y;
}

}  // namespace minidl::ops
