// tril/triu and masked_fill with their gradients; each backward runs the forward's own kernel
// on the gradient, since both ops pass some elements through unchanged and replace the others
// with constants:
//   tril:        y = x on the kept triangle, 0 elsewhere  ->  dx = tril(dy), likewise triu
//   masked_fill: y = mask ? value : x                     ->  dx = mask ? 0 : dy
#include "core/ops/mask.h"

#include "core/autograd.h"
#include "core/backend.h"

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

// y = mask ? value : x; x and mask contiguous with x's shape and dtype.
Tensor apply_masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const Tensor xc = x.contiguous();
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0) backend_for(x.device()).masked_fill(xc, mask, value, y);
  return y;
}

struct MaskedFillBackward final : Node {
  Tensor mask;  // expanded to x's shape, in x's dtype, contiguous
  std::vector<Tensor> apply(const Tensor& g) override { return {apply_masked_fill(g, mask, 0.0)}; }
  void release_saved() override { mask = Tensor(); }
  std::string name() const override { return "MaskedFillBackward"; }
};

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
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
  // The kernel reads one mask element per element of x, in x's dtype (nonzero stays nonzero).
  const Tensor m = mask.detach().to(x.dtype()).expand(x.shape()).contiguous();
  Tensor y = apply_masked_fill(x.detach(), m, value);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<MaskedFillBackward>();
    node->mask = m;
    autograd::attach(node, {&x}, y);
  }
  return y;
}

}  // namespace minidl::ops
