// max_pool2d, avg_pool2d and adaptive_avg_pool2d (1×1), with their gradients:
//   max: y = max of the window, dx[argmax] += dy (the argmax indices saved from forward)
//   avg: y = Σ window / divisor, dx[window] += dy / divisor
//   adaptive 1×1: avg_pool2d with one window covering the whole plane.
// Kernels: kernels/*/pool.*.
#include "core/ops/pool.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

Pool2dGeometry pool_geometry(const char* op, const Tensor& x, Size2 kernel, std::optional<Size2> stride_opt,
                             Size2 padding) {
  check_defined(x, op, "x");
  MINIDL_CHECK(is_floating(x.dtype()), op, ": x must be a floating dtype (float32, float64, bfloat16, float16), got ", x.dtype(), " with shape ",
               x.shape());
  check_backend_computes(x, op, "x");
  MINIDL_CHECK(x.dim() == 4, op, ": expected input x of rank 4 [N, C, H, W], got shape ", x.shape());
  const Size2 stride = stride_opt.value_or(kernel);
  MINIDL_CHECK(kernel[0] >= 1 && kernel[1] >= 1, op, ": kernel size must be >= 1, got ", size2_str(kernel), " (x ",
               x.shape(), ")");
  MINIDL_CHECK(stride[0] >= 1 && stride[1] >= 1, op, ": stride must be >= 1, got ", size2_str(stride), " (x ", x.shape(),
               ")");
  MINIDL_CHECK(padding[0] >= 0 && padding[1] >= 0 && 2 * padding[0] <= kernel[0] && 2 * padding[1] <= kernel[1], op,
               ": padding must be between 0 and half the kernel size, got padding ", size2_str(padding), " for kernel ",
               size2_str(kernel), " (x ", x.shape(), ")");
  Pool2dGeometry g;
  g.n = x.shape()[0];
  g.c = x.shape()[1];
  g.h = x.shape()[2];
  g.w = x.shape()[3];
  g.kh = kernel[0];
  g.kw = kernel[1];
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.pad_h = padding[0];
  g.pad_w = padding[1];
  MINIDL_CHECK(g.kh <= g.h + 2 * g.pad_h && g.kw <= g.w + 2 * g.pad_w, op, ": the kernel ", size2_str(kernel),
               " is larger than the padded input (", g.h + 2 * g.pad_h, " x ", g.w + 2 * g.pad_w, ": x ", x.shape(),
               " with padding ", size2_str(padding), ")");
  g.h_out = (g.h + 2 * g.pad_h - g.kh) / g.stride_h + 1;
  g.w_out = (g.w + 2 * g.pad_w - g.kw) / g.stride_w + 1;
  return g;
}

Shape out_shape(const Pool2dGeometry& g) { return Shape{g.n, g.c, g.h_out, g.w_out}; }

struct MaxPool2dBackward final : Node {
  Tensor indices;  // int64 [N, C, H_out, W_out]
  Shape input_shape;
  TensorOptions options;
  Pool2dGeometry geometry;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dx = empty(input_shape, options);
    if (dx.numel() > 0) backend_for(options.device).max_pool2d_backward(g.contiguous(), indices, dx, geometry);
    return {dx};
  }
  void release_saved() override { indices = Tensor(); }
  std::string name() const override { return "MaxPool2dBackward"; }
};

struct AvgPool2dBackward final : Node {
  Shape input_shape;
  TensorOptions options;
  Pool2dGeometry geometry;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dx = empty(input_shape, options);
    if (dx.numel() > 0) backend_for(options.device).avg_pool2d_backward(g.contiguous(), dx, geometry);
    return {dx};
  }
  std::string name() const override { return "AvgPool2dBackward"; }
};

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding) {
  profiler::RecordScope profile_scope("max_pool2d", profiler::Kind::Op, {&x});
  const Pool2dGeometry g = pool_geometry("max_pool2d", x, kernel, stride, padding);
  const Tensor xc = x.detach().contiguous();
  Tensor y = empty(out_shape(g), x.options());
  Tensor indices = empty(out_shape(g), TensorOptions(DType::Int64, x.device()));
  if (y.numel() > 0) backend_for(x.device()).max_pool2d_forward(xc, y, indices, g);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<MaxPool2dBackward>();
    node->indices = indices;
    node->input_shape = x.shape();
    node->options = x.options();
    node->geometry = g;
    autograd::attach(node, {&x}, y);
  }
  return y;
}

namespace {

Tensor avg_pool(const char* op, const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding,
                bool count_include_pad) {
  Pool2dGeometry g = pool_geometry(op, x, kernel, stride, padding);
  g.count_include_pad = count_include_pad;
  const Tensor xc = x.detach().contiguous();
  Tensor y = empty(out_shape(g), x.options());
  if (y.numel() > 0) backend_for(x.device()).avg_pool2d_forward(xc, y, g);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<AvgPool2dBackward>();
    node->input_shape = x.shape();
    node->options = x.options();
    node->geometry = g;
    autograd::attach(node, {&x}, y);
  }
  return y;
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride, Size2 padding, bool count_include_pad) {
  profiler::RecordScope profile_scope("avg_pool2d", profiler::Kind::Op, {&x});
  return avg_pool("avg_pool2d", x, kernel, stride, padding, count_include_pad);
}

Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size) {
  profiler::RecordScope profile_scope("adaptive_avg_pool2d", profiler::Kind::Op, {&x});
  check_defined(x, "adaptive_avg_pool2d", "x");
  MINIDL_CHECK(output_size[0] == 1 && output_size[1] == 1,
               "adaptive_avg_pool2d: only output size (1, 1) (global average pooling) is supported, got ",
               size2_str(output_size), " for x ", x.shape());
  MINIDL_CHECK(x.dim() == 4, "adaptive_avg_pool2d: expected input x of rank 4 [N, C, H, W], got shape ", x.shape());
  MINIDL_CHECK(x.shape()[2] >= 1 && x.shape()[3] >= 1, "adaptive_avg_pool2d: x ", x.shape(),
               " has an empty plane; there is nothing to average");
  const Size2 plane = {x.shape()[2], x.shape()[3]};
  return avg_pool("adaptive_avg_pool2d", x, plane, plane, {0, 0}, true);
}

}  // namespace minidl::ops
