// log_softmax, softmax and the fused softmax-cross-entropy loss, with their gradients.
//   log_softmax(x)_j = x_j - logsumexp(x);   dx = dy - softmax(x) · Σ dy
//   softmax(x)_j = exp(x_j - logsumexp(x));   dx = y ⊙ (dy - Σ dy ⊙ y)
//   CE(x, t) = logsumexp(x) - x_t per row;    dx = (softmax(x) - onehot(t)) · dloss_row
//   with label smoothing ε, the target distribution q = (1 - ε)·onehot(t) + ε/C:
//   CE = (1 - ε)·(logsumexp(x) - x_t) + ε·(logsumexp(x) - Σ_j x_j / C);   dx = (softmax(x) - q) · dloss_row
//   and a row whose target is ignore_index has CE = 0 and dx = 0 (the mean counts only the others)
// evaluated as Note [softmax at the logits' scale] says.
//
// Note [softmax at the logits' scale]: the kernels of this family (kernels/cpu/softmax.cpp,
// kernels/cuda/softmax.cu, cross_entropy.cu) work from each row's max m and s = Σ_j exp(x_j - m),
// and never form lse = m + log s as one float: rounded at the logits' scale (half an ulp of
// |lse|: 3.8e-6 at 80, 3.1e-5 at 1000), it would put that absolute error into every x - lse, so
// into every log-probability and loss, and as a relative error into every exp(x - lse). In a
// saturated row, where the loss of a confident prediction is tiny, that error dwarfs it. Instead
//   log_softmax_j = (x_j - m) - log s,   softmax_j = exp(x_j - m) · (1/s),   CE = log s - (x_t - m),
// as PyTorch's kernels do: x_j - m is exact when x_j and m are within a factor 2 (Sterbenz) and
// otherwise off by at most half an ulp of |x_j - m|, and log s lies in [0, log C]. So the
// separate cross-entropy path keeps (m, 1/s) per row for its backward, a [N, 2] tensor, not lse.
//
// Note [fused cross-entropy]: in training the loss is always followed by backward, and
// dloss_row is known in forward (1/count for the mean, 1 for sum/none) up to the upstream
// gradient g, which is the engine's implicit 1 when loss.backward() is called on the loss
// itself. So forward computes loss and dlogits in the same pass over the logits (llm.c's fused
// classifier), and backward returns dlogits untouched for the unit seed, or dlogits · g.
// count (the rows whose target is not ignore_index) is known only where the targets are, so
// 1/count is made there (Backend::cross_entropy_mean_scale, one small kernel, the launch that
// used to fill the constant 1/N) and the fused kernel reads it on the device: no host wait.
// Rows are the last dim; another dim is moved last by a transpose + copy.
#include "core/ops/softmax.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/elementwise.h"
#include "core/ops/view.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

// x as a contiguous [rows, cols] matrix with the softmax dim last.
Tensor as_rows(const Tensor& x, int d) {
  Tensor moved = d == x.dim() - 1 ? x : transpose(x, d, x.dim() - 1);
  moved = moved.contiguous();
  const int64_t cols = moved.dim() == 0 ? 1 : moved.shape().back();
  return moved.reshape(Shape{cols == 0 ? 0 : moved.numel() / cols, cols});
}

struct LogSoftmaxBackward final : Node {
  Tensor y;  // [rows, cols]
  bool log = true;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dx = empty(y.shape(), y.options());
    Backend& be = backend_for(y.device());
    const Tensor gc = g.contiguous();
    if (log) be.log_softmax_backward(gc, y, dx);
    else be.softmax_backward(gc, y, dx);
    return {dx};
  }
  void release_saved() override { y = Tensor(); }
  std::string name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
};

Tensor softmax_family(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(x, name, "x");
  MINIDL_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", x.dtype(), " with shape ", x.shape());
  MINIDL_CHECK(x.dim() >= 1, name, ": expected at least one dim, got a scalar");
  check_backend_computes(x, name, "x");
  const int d = wrap_dim(dim, x.dim(), name);
  // Differentiable rearrangement; the kernel runs on the [rows, cols] matrix.
  Tensor rows = as_rows(x, d);
  Tensor y = empty(rows.shape(), rows.options());
  if (y.numel() > 0) {
    Backend& be = backend_for(x.device());
    if (log) be.log_softmax_forward(rows.detach(), y);
    else be.softmax_forward(rows.detach(), y);
  }
  if (autograd::any_requires_grad({&rows})) {
    auto node = std::make_shared<LogSoftmaxBackward>();
    node->y = y.detach();
    node->log = log;
    autograd::attach(node, {&rows}, y);
  }
  // Undo the rearrangement (differentiable views).
  Shape moved_shape = x.shape();
  std::swap(moved_shape[d], moved_shape[x.dim() - 1]);
  Tensor out = y.reshape(moved_shape);
  return d == x.dim() - 1 ? out : transpose(out, d, x.dim() - 1);
}

struct SoftmaxCrossEntropyBackward final : Node {
  Tensor logits, targets;
  Tensor stats;       // [N, 2]: (m, 1/s) per row, Note [softmax at the logits' scale]
  Tensor mean_scale;  // Mean: 1 / (rows not ignored), one element on the logits' device
  Reduction reduction = Reduction::Mean;
  CrossEntropyOptions options;
  std::vector<Tensor> apply(const Tensor& g) override {
    // The gradient of each row's loss: g / count (mean), g (sum), or g[row] (none).
    Tensor scale = reduction == Reduction::Mean ? g * mean_scale : g;
    Tensor dlogits = empty(logits.shape(), logits.options());
    backend_for(logits.device())
        .softmax_cross_entropy_backward(logits, targets, stats, scale.contiguous(), dlogits, options);
    return {dlogits, Tensor()};
  }
  void release_saved() override { logits = targets = stats = mean_scale = Tensor(); }
  std::string name() const override { return "SoftmaxCrossEntropyBackward"; }
};

// Backward of the fused path: dlogits were computed in forward for a unit upstream gradient.
struct FusedSoftmaxCrossEntropyBackward final : Node {
  Tensor dlogits;  // [N, C] = (softmax - target distribution) · (1/count for Mean, 1 otherwise), 0 where ignored
  Reduction reduction = Reduction::Mean;
  std::vector<Tensor> apply_unit_seed(const Tensor&) override { return {dlogits, Tensor()}; }
  std::vector<Tensor> apply(const Tensor& g) override {
    const Shape& shape = dlogits.shape();
    // g is a scalar (Mean, Sum) or one value per row (None): broadcast it over the row.
    const Tensor gb = reduction == Reduction::None ? expand(reshape(g, Shape{shape[0], 1}), shape) : expand(g, shape);
    Tensor out = empty(shape, dlogits.options());
    backend_for(dlogits.device()).binary(BinaryOp::Mul, dlogits, gb, out);
    return {out, Tensor()};
  }
  void release_saved() override { dlogits = Tensor(); }
  std::string name() const override { return "FusedSoftmaxCrossEntropyBackward"; }
};

}  // namespace

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (auto cast = autocast::cast_inputs("log_softmax", {&x})) return log_softmax((*cast)[0], dim);
  profiler::RecordScope profile_scope("log_softmax", profiler::Kind::Op, {&x});
  return softmax_family(x, dim, true);
}
Tensor softmax(const Tensor& x, int64_t dim) {
  if (auto cast = autocast::cast_inputs("softmax", {&x})) return softmax((*cast)[0], dim);
  profiler::RecordScope profile_scope("softmax", profiler::Kind::Op, {&x});
  return softmax_family(x, dim, false);
}

Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction,
                             CrossEntropyGrad grad_mode, const CrossEntropyOptions& options) {
  if (auto cast = autocast::cast_inputs("softmax_cross_entropy", {&logits}))
    return softmax_cross_entropy((*cast)[0], targets, reduction, grad_mode, options);
  // A reduced loss of 16-bit logits: the float32 loss rounded once, as PyTorch's. Summed in 16
  // bits it would overflow in float16 past 65504 and be scaled by a rounded 1/count.
  if (logits.defined() && is_half(logits.dtype()) && reduction != Reduction::None) {
    const Tensor wide = to(logits, logits.device(), DType::Float32);
    return to(softmax_cross_entropy(wide, targets, reduction, grad_mode, options), logits.device(), logits.dtype());
  }
  profiler::RecordScope profile_scope("softmax_cross_entropy", profiler::Kind::Op, {&logits, &targets});
  constexpr const char* op = "softmax_cross_entropy";
  check_defined(logits, op, "logits");
  check_defined(targets, op, "targets");
  MINIDL_CHECK(is_floating(logits.dtype()), op, ": logits must be a floating dtype (float32, float64, bfloat16, float16), got ", logits.dtype(),
               " with shape ", logits.shape());
  MINIDL_CHECK(targets.dtype() == DType::Int64, op, ": targets must be int64 class indices, got ", targets.dtype(),
               " with shape ", targets.shape(), " (convert with .to(DType::Int64))");
  MINIDL_CHECK(logits.dim() == 2, op, ": logits must be [N, C], got shape ", logits.shape());
  MINIDL_CHECK(targets.dim() == 1 && targets.shape()[0] == logits.shape()[0], op, ": targets must be [N] = [",
               logits.shape()[0], "] for logits ", logits.shape(), ", got shape ", targets.shape());
  check_same_device({&logits, &targets}, op);
  const double eps = options.label_smoothing;
  MINIDL_CHECK(eps >= 0.0 && eps <= 1.0, op, ": label_smoothing must lie in [0, 1], got ", eps);
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  MINIDL_CHECK(n > 0, op, ": empty batch (logits ", logits.shape(), "); the loss of zero samples is undefined");
  MINIDL_CHECK(c > 0, op, ": logits ", logits.shape(), " have no classes");
  check_backend_computes(logits, op, "logits");
  Backend& be = backend_for(logits.device());
  const Tensor lc = logits.detach().contiguous(), tc = targets.contiguous();
  // Note [deferred target errors] (kernels/cuda/cross_entropy.cu, docs/cuda.md): on a GPU this error may come at the next host wait.
  be.check_targets(
      tc, c,
      [op, c, ignore = options.ignore_index, shape = logits.shape()](int64_t row, int64_t value) {
        return detail::make_message(op, ": target ", value, " at row ", row, " is out of range [0, ", c,
                                    ") for logits ", shape, " (and is not ignore_index ", ignore, ")");
      },
      options.ignore_index);
  // The mean divides by the rows not ignored: 1/count is computed where the targets are, so the
  // fused kernel and the final multiply read it there and the host never waits for it.
  Tensor mean_scale;
  if (reduction == Reduction::Mean) {
    mean_scale = empty(Shape{}, logits.options());
    be.cross_entropy_mean_scale(tc, options.ignore_index, mean_scale);
  }
  const bool needs_grad = autograd::any_requires_grad({&logits});
  const bool fused = needs_grad && grad_mode == CrossEntropyGrad::Fused;
  Tensor losses = empty(Shape{n}, logits.options());
  Tensor stats, dlogits;
  if (fused) {
    dlogits = empty(logits.shape(), logits.options());
    be.softmax_cross_entropy_fused(lc, tc, mean_scale, losses, dlogits, options);
  } else {
    stats = empty(Shape{n, 2}, logits.options().with_dtype(compute_dtype(logits.dtype())));  // (m, 1/s) per row
    be.softmax_cross_entropy_forward(lc, tc, losses, stats, options);
  }
  Tensor out;
  if (reduction == Reduction::None) {
    out = losses;
  } else {
    out = empty(Shape{}, logits.options());
    be.sum_dim(losses, 1, n, 1, out);
    if (reduction == Reduction::Mean) be.binary(BinaryOp::Mul, out, mean_scale, out);  // 0 · inf = NaN when all ignored
  }
  if (fused) {
    auto node = std::make_shared<FusedSoftmaxCrossEntropyBackward>();
    node->dlogits = dlogits;
    node->reduction = reduction;
    autograd::attach(node, {&logits, &targets}, out);
  } else if (needs_grad) {
    auto node = std::make_shared<SoftmaxCrossEntropyBackward>();
    node->logits = lc;
    node->targets = tc;
    node->stats = stats;
    node->mean_scale = mean_scale;
    node->reduction = reduction;
    node->options = options;
    autograd::attach(node, {&logits, &targets}, out);
  }
  return out;
}

}  // namespace minidl::ops
