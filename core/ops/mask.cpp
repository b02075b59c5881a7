// tril/triu and masked_fill with their gradients; each backward runs the forward's own kernel
// on the gradient, since both ops pass some elements through unchanged and replace the others
// with constants:
//   tril:        y = x on the kept triangle, 0 elsewhere  ->  dx = tril(dy), likewise triu
//   masked_fill: y = mask ? value : x                     ->  dx = mask ? 0 : dy
#include "core/ops/mask.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/elementwise.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

// x [..., R, C] contiguous through the triangle kernel, viewed as [batch, R, C].
Tensor apply_triangle(const Tensor& x, int64_t diagonal, bool upper) {
  const Tensor xc = x.contiguous();
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() == 0) return y;
  const int r = x.dim();
  const Shape as_batch{x.numel() / (x.shape()[r - 2] * x.shape()[r - 1]), x.shape()[r - 2], x.shape()[r - 1]};
  const Tensor x3 = xc.view(as_batch);
  Tensor y3 = y.view(as_batch);
  backend_for(x.device()).triangle(x3, y3, diagonal, upper);
  return y;
}

struct TriangleBackward final : Node {
  int64_t diagonal = 0;
  bool upper = false;
  std::vector<Tensor> apply(const Tensor& g) override { return {apply_triangle(g, diagonal, upper)}; }
  std::string name() const override { return upper ? "TriuBackward" : "TrilBackward"; }
};

Tensor triangle(const Tensor& x, int64_t diagonal, bool upper) {
  const char* op = upper ? "triu" : "tril";
  check_defined(x, op, "x");
  MINIDL_CHECK(x.dim() >= 2, op, ": expected a tensor with at least 2 dims [..., R, C], got shape ", x.shape());
  check_backend_computes(x, op, "x");
  Tensor y = apply_triangle(x.detach(), diagonal, upper);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<TriangleBackward>();
    node->diagonal = diagonal;
    node->upper = upper;
    autograd::attach(node, {&x}, y);
  }
  return y;
}

// y = mask ? value : x; mask has x's shape and dtype, with any strides (mask_as_view).
Tensor apply_masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const Tensor xc = x.contiguous();
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0) backend_for(x.device()).masked_fill(xc, mask, value, y);
  return y;
}

struct MaskedFillBackward final : Node {
  Tensor mask;  // mask_as_view: x's shape and dtype, the mask's own storage
  std::vector<Tensor> apply(const Tensor& g) override { return {apply_masked_fill(g, mask, 0.0)}; }
  void release_saved() override { mask = Tensor(); }
  std::string name() const override { return "MaskedFillBackward"; }
};

// The mask as the kernels read it: in x's dtype at the mask's own size, then expanded to x's
// shape as a view (stride 0 along the broadcast dims), so a causal [T, T] mask over attention's
// [B, H, T, T] scores is never copied B·H times, neither for the forward nor for the saved
// backward. A mask of another dtype first becomes 0/1 (nonzero -> 1): a plain cast would turn
// a fractional float into int64 0, or a tiny float64 into float32 0, and lose a true.
Tensor mask_as_view(const Tensor& mask, const Tensor& x) {
  Tensor m = mask.detach();
  if (m.dtype() != x.dtype()) {
    const Tensor is_zero = ops::eq(m, zeros(Shape{}, m.options()));  // float32 0/1
    m = ops::eq(is_zero, zeros(Shape{}, is_zero.options())).to(x.dtype());
  }
  return m.expand(x.shape());
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  profiler::RecordScope profile_scope("tril", profiler::Kind::Op, {&x}); return triangle(x, diagonal, false); }
Tensor triu(const Tensor& x, int64_t diagonal) {
  profiler::RecordScope profile_scope("triu", profiler::Kind::Op, {&x}); return triangle(x, diagonal, true); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  profiler::RecordScope profile_scope("masked_fill", profiler::Kind::Op, {&x, &mask});
  check_defined(x, "masked_fill", "x");
  check_defined(mask, "masked_fill", "mask");
  check_same_device({&x, &mask}, "masked_fill");
  bool broadcasts = mask.dim() <= x.dim();
  for (int i = 0; broadcasts && i < mask.dim(); ++i) {
    const int64_t have = mask.shape()[i], want = x.shape()[x.dim() - mask.dim() + i];
    broadcasts = have == want || have == 1;
  }
  MINIDL_CHECK(broadcasts, "masked_fill: mask of shape ", mask.shape(), " does not broadcast to x's shape ", x.shape());
  check_backend_computes(x, "masked_fill", "x");
  const Tensor m = mask_as_view(mask, x);
  Tensor y = apply_masked_fill(x.detach(), m, value);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<MaskedFillBackward>();
    node->mask = m;
    autograd::attach(node, {&x}, y);
  }
  return y;
}

}  // namespace minidl::ops
