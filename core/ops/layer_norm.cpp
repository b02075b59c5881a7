// layer_norm and its gradient, over the last dim of x viewed as [rows, D] (formulas in
// kernels/cpu/layer_norm.cpp). As in PyTorch, forward keeps each row's mean and
// rstd = 1/sqrt(var + eps) for backward, which then needs x but not y; the statistics depend on
// the row, so dx carries the terms through the mean and the variance:
//   y = x̂·w + b,  x̂ = (x − mean)·rstd
//   dx = rstd·(g − mean_j(g) − x̂·mean_j(g·x̂)) with g = dy·w;  dw = Σ_rows dy·x̂;  db = Σ_rows dy
#include "core/ops/layer_norm.h"

#include <cmath>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct LayerNormBackward final : Node {
  Tensor x, weight, mean, rstd;  // x [rows, D]; weight [D] or undefined; mean, rstd [rows]
  Shape x_shape;                 // x as the caller gave it
  bool has_weight = false, has_bias = false;
  std::vector<Tensor> apply(const Tensor& g) override {
    const int64_t D = x.shape()[1];
    Tensor dx = next_edges[0].valid() ? empty(x.shape(), x.options()) : Tensor();
    Tensor dw = has_weight && next_edges[1].valid() ? empty(Shape{D}, x.options()) : Tensor();
    Tensor db = has_bias && next_edges[2].valid() ? empty(Shape{D}, x.options()) : Tensor();
    // D = 0: every gradient is empty, and there is no row statistic to read.
    if (D > 0) {
      const Tensor dy = g.contiguous().reshape(x.shape());
      backend_for(x.device()).layer_norm_backward(dy, x, weight, mean, rstd, dx, dw, db);
    }
    return {dx.defined() ? dx.reshape(x_shape) : dx, dw, db};
  }
  void release_saved() override { x = weight = mean = rstd = Tensor(); }
  std::string name() const override { return "LayerNormBackward"; }
};

void check_feature_vector(const Tensor& t, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  const int64_t D = x.shape().back();
  MINIDL_CHECK(t.dim() == 1 && t.shape()[0] == D, "layer_norm: ", what, " has shape ", t.shape(), ", expected [", D,
               "] for x ", x.shape(), " (one value per element of the last dim)");
  MINIDL_CHECK(t.dtype() == x.dtype(), "layer_norm: ", what, " is ", t.dtype(), " but x is ", x.dtype(),
               " (shape ", x.shape(), ")");
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  if (auto cast = autocast::cast_inputs("layer_norm", {&x, &weight, &bias}))
    return layer_norm((*cast)[0], (*cast)[1], (*cast)[2], eps);
  profiler::RecordScope profile_scope("layer_norm", profiler::Kind::Op, {&x, &weight, &bias});
  check_defined(x, "layer_norm", "x");
  check_same_device({&x, &weight, &bias}, "layer_norm");
  MINIDL_CHECK(is_floating(x.dtype()), "layer_norm: x must be a floating dtype (float32, float64, bfloat16, float16), got ", x.dtype(), " with shape ",
               x.shape());
  MINIDL_CHECK(x.dim() >= 1, "layer_norm: expected x of rank >= 1 [..., D], got a scalar");
  check_backend_computes(x, "layer_norm", "x");
  check_feature_vector(weight, "weight", x);
  check_feature_vector(bias, "bias", x);
  MINIDL_CHECK(std::isfinite(eps) && eps >= 0, "layer_norm: expected a finite eps >= 0, got ", eps, " (x ", x.shape(),
               ")");
  const int64_t D = x.shape().back();
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.shape()[d];
  const Tensor xc = x.detach().contiguous().reshape(Shape{rows, D});  // [rows, D]
  const Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty(x.shape(), x.options());
  // The statistics backward reads stay in the compute dtype (float32 for 16-bit x: a rounded
  // rstd would scale every gradient by its rounding error).
  const TensorOptions stats_options = x.options().with_dtype(compute_dtype(x.dtype()));
  Tensor mean = empty(Shape{rows}, stats_options), rstd = empty(Shape{rows}, stats_options);
  if (rows > 0 && D > 0) {
    Tensor y2 = y.view(Shape{rows, D});  // y's storage, as the kernel's [rows, D]
    backend_for(x.device()).layer_norm_forward(xc, wc, bc, eps, y2, mean, rstd);
  }
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->x = xc;
    node->weight = wc;
    node->mean = mean;
    node->rstd = rstd;
    node->x_shape = x.shape();
    node->has_weight = weight.defined();
    node->has_bias = bias.defined();
    autograd::attach(node, {&x, &weight, &bias}, y);
  }
  return y;
}

}  // namespace minidl::ops
