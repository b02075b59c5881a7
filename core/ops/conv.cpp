// conv2d and its gradient. The arithmetic is the backend's (kernels/*/conv.*: im2col + GEMM,
// see docs/conv-as-gemm.md); this file checks every way the arguments can disagree and wires
// the autograd node:
//   y = conv2d(x, w) + b;   dx = conv_transpose(dy, w),  dw = correlation of x with dy,  db = Σ dy
// all three computed by one backend call from dy, x and w.
#include "core/ops/conv.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct Conv2dBackward final : Node {
  Tensor x, w;
  Conv2dGeometry geometry;
  bool has_bias = false;
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor dy = g.contiguous();
    Tensor dx = next_edges[0].valid() ? empty(x.shape(), x.options()) : Tensor();
    Tensor dw = next_edges[1].valid() ? empty(w.shape(), w.options()) : Tensor();
    Tensor db = has_bias && next_edges[2].valid() ? empty(Shape{w.shape()[0]}, w.options()) : Tensor();
    if (dy.numel() > 0) {
      backend_for(x.device()).conv2d_backward(dy, x, w, dx, dw, db, geometry);
    } else {  // an empty batch: no gradient flows
      if (dw.defined()) dw.zero_();
      if (db.defined()) db.zero_();
      if (dx.defined()) dx.zero_();
    }
    return {dx, dw, db};
  }
  void release_saved() override { x = w = Tensor(); }
  std::string name() const override { return "Conv2dBackward"; }
};

}  // namespace

Conv2dGeometry conv2d_geometry(const Shape& xs, const Shape& ws, Size2 stride, Size2 padding, Size2 dilation,
                               int64_t groups) {
  MINIDL_CHECK(xs.size() == 4, "conv2d: expected input x of rank 4 [N, C_in, H, W], got shape ", xs);
  MINIDL_CHECK(ws.size() == 4, "conv2d: expected weight of rank 4 [C_out, C_in/groups, KH, KW], got shape ", ws);
  MINIDL_CHECK(stride[0] >= 1 && stride[1] >= 1, "conv2d: stride must be >= 1 in both dims, got ", size2_str(stride),
               " (x ", xs, ", weight ", ws, ")");
  MINIDL_CHECK(dilation[0] >= 1 && dilation[1] >= 1, "conv2d: dilation must be >= 1 in both dims, got ",
               size2_str(dilation), " (x ", xs, ", weight ", ws, ")");
  MINIDL_CHECK(padding[0] >= 0 && padding[1] >= 0, "conv2d: padding must be >= 0, got ", size2_str(padding), " (x ", xs,
               ", weight ", ws, ")");
  MINIDL_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  Conv2dGeometry g;
  g.n = xs[0];
  g.c_in = xs[1];
  g.h = xs[2];
  g.w = xs[3];
  g.c_out = ws[0];
  g.kh = ws[2];
  g.kw = ws[3];
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.pad_h = padding[0];
  g.pad_w = padding[1];
  g.dilation_h = dilation[0];
  g.dilation_w = dilation[1];
  g.groups = groups;
  MINIDL_CHECK(g.c_in % groups == 0 && g.c_out % groups == 0, "conv2d: input channels (", g.c_in,
               ", x ", xs, ") and output channels (", g.c_out, ", weight ", ws, ") must both be divisible by groups = ",
               groups);
  MINIDL_CHECK(ws[1] == g.c_in / groups, "conv2d: x has ", g.c_in, " channels (shape ", xs, "), so with groups = ",
               groups, " the weight's dim 1 must be ", g.c_in / groups, ", got weight ", ws);
  MINIDL_CHECK(g.kh >= 1 && g.kw >= 1 && g.c_out >= 1, "conv2d: weight ", ws, " has an empty kernel or no output channels");
  const int64_t eff_h = g.dilation_h * (g.kh - 1) + 1, eff_w = g.dilation_w * (g.kw - 1) + 1;
  MINIDL_CHECK(eff_h <= g.h + 2 * g.pad_h && eff_w <= g.w + 2 * g.pad_w, "conv2d: the kernel (", eff_h, " x ", eff_w,
               " with dilation ", size2_str(dilation), ", weight ", ws, ") is larger than the padded input (",
               g.h + 2 * g.pad_h, " x ", g.w + 2 * g.pad_w, ": x ", xs, " with padding ", size2_str(padding), ")");
  g.h_out = (g.h + 2 * g.pad_h - eff_h) / g.stride_h + 1;
  g.w_out = (g.w + 2 * g.pad_w - eff_w) / g.stride_w + 1;
  return g;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Size2 stride, Size2 padding, Size2 dilation,
              int64_t groups) {
  if (auto cast = autocast::cast_inputs("conv2d", {&x, &w, &b}))
    return conv2d((*cast)[0], (*cast)[1], (*cast)[2], stride, padding, dilation, groups);
  profiler::RecordScope profile_scope("conv2d", profiler::Kind::Op, {&x, &w, &b});
  check_defined(x, "conv2d", "x");
  check_defined(w, "conv2d", "weight");
  check_same_device({&x, &w, &b}, "conv2d");
  MINIDL_CHECK(is_floating(x.dtype()), "conv2d: x must be a floating dtype (float32, float64, bfloat16, float16), got ", x.dtype(), " with shape ",
               x.shape());
  check_backend_computes(x, "conv2d", "x");
  MINIDL_CHECK(x.dtype() == w.dtype(), "conv2d: x is ", x.dtype(), " but weight is ", w.dtype());
  const Conv2dGeometry g = conv2d_geometry(x.shape(), w.shape(), stride, padding, dilation, groups);
  if (b.defined()) {
    MINIDL_CHECK(b.dim() == 1 && b.shape()[0] == g.c_out, "conv2d: bias has shape ", b.shape(), ", expected [",
                 g.c_out, "] for weight ", w.shape());
    MINIDL_CHECK(b.dtype() == w.dtype(), "conv2d: bias is ", b.dtype(), " but weight is ", w.dtype());
  }
  const Tensor xc = x.detach().contiguous(), wc = w.detach().contiguous();
  const Tensor bc = b.defined() ? b.detach().contiguous() : Tensor();
  Tensor y = empty(Shape{g.n, g.c_out, g.h_out, g.w_out}, x.options());
  if (y.numel() > 0) backend_for(x.device()).conv2d_forward(xc, wc, bc, y, g);
  if (autograd::any_requires_grad({&x, &w, &b})) {
    auto node = std::make_shared<Conv2dBackward>();
    node->x = xc;
    node->w = wc;
    node->geometry = g;
    node->has_bias = b.defined();
    autograd::attach(node, {&x, &w, &b}, y);
  }
  return y;
}

}  // namespace minidl::ops
