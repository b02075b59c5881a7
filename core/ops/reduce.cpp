// Reductions and their gradients.
//   sum(x) over all or one dim: the kernel sees x as [outer, n, inner] and sums over n in a
//   fixed order. d sum = the gradient broadcast back (expand) over the reduced dims.
//   mean = sum / n. sum_to(g, shape) sums g over the dims that `shape` broadcast along.
#include "core/ops/reduce.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/elementwise.h"
#include "core/ops/view.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

struct SumBackward final : Node {
  Shape input_shape, keepdim_shape;  // gradient arrives without the reduced dims
  std::vector<Tensor> apply(const Tensor& g) override {
    return {expand(g.reshape(keepdim_shape), input_shape).contiguous()};
  }
  std::string name() const override { return "SumBackward"; }
};

// Sums contiguous x over dims [d] viewed as [outer, n, inner]; returns the keepdim shape.
Tensor sum_kernel(const Tensor& x, int d, Shape keep_shape) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape()[i];
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  const int64_t n = x.shape()[d];
  Tensor out = empty(keep_shape, x.options());
  if (out.numel() == 0) return out;
  if (n == 0) {
    backend_for(x.device()).fill(out, 0.0);
  } else {
    backend_for(x.device()).sum_dim(x.detach().contiguous(), outer, n, inner, out);
  }
  return out;
}

Tensor attach_sum(const Tensor& x, Tensor out, const Shape& keep_shape) {
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<SumBackward>();
    node->input_shape = x.shape();
    node->keepdim_shape = keep_shape;
    autograd::attach(node, {&x}, out);
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) {
  if (auto cast = autocast::cast_inputs("sum", {&x})) return sum((*cast)[0]);
  profiler::RecordScope profile_scope("sum", profiler::Kind::Op, {&x});
  check_defined(x, "sum", "x");
  check_backend_computes(x, "sum", "x");
  Tensor flat = x.detach().contiguous();
  flat = make_view(flat, Shape{x.numel()}, Shape{1}, flat.offset());
  Tensor out = sum_kernel(flat, 0, Shape{1});
  out = make_view(out, Shape{}, Shape{}, 0);
  return attach_sum(x, out, Shape::filled(x.dim(), 1));
}

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  if (auto cast = autocast::cast_inputs("sum", {&x})) return sum((*cast)[0], dim, keepdim);
  profiler::RecordScope profile_scope("sum", profiler::Kind::Op, {&x});
  check_defined(x, "sum", "x");
  check_backend_computes(x, "sum", "x");
  const int d = wrap_dim(dim, x.dim(), "sum");
  Shape keep_shape = x.shape();
  keep_shape[d] = 1;
  Tensor out = sum_kernel(x, d, keep_shape);
  if (!keepdim) {
    Shape squeezed = x.shape();
    squeezed.erase(d);
    out = make_view(out, squeezed, contiguous_strides(squeezed), 0);
  }
  return attach_sum(x, out, keep_shape);
}

Tensor mean(const Tensor& x) {
  if (auto cast = autocast::cast_inputs("mean", {&x})) return mean((*cast)[0]);
  profiler::RecordScope profile_scope("mean", profiler::Kind::Op, {&x});
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()), "mean: expected a floating tensor",
               x.defined() ? detail::make_message(", got ", x.dtype()) : std::string());
  MINIDL_CHECK(x.numel() > 0, "mean: the mean of an empty tensor (shape ", x.shape(), ") is undefined");
  // A 16-bit mean is the float32 mean rounded once (PyTorch's): a 16-bit sum first could overflow
  // (float16 ends at 65504) and would be rounded twice.
  if (is_half(x.dtype())) return to(mean(to(x, x.device(), DType::Float32)), x.device(), x.dtype());
  return sum(x) * (1.0 / static_cast<double>(x.numel()));
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  if (auto cast = autocast::cast_inputs("mean", {&x})) return mean((*cast)[0], dim, keepdim);
  profiler::RecordScope profile_scope("mean", profiler::Kind::Op, {&x});
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()), "mean: expected a floating tensor",
               x.defined() ? detail::make_message(", got ", x.dtype()) : std::string());
  const int d = wrap_dim(dim, x.dim(), "mean");
  MINIDL_CHECK(x.shape()[d] > 0, "mean: dim ", d, " of shape ", x.shape(), " is empty");
  if (is_half(x.dtype())) return to(mean(to(x, x.device(), DType::Float32), d, keepdim), x.device(), x.dtype());
  return sum(x, d, keepdim) * (1.0 / static_cast<double>(x.shape()[d]));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  profiler::RecordScope profile_scope("sum_to", profiler::Kind::Op, {&x});
  if (x.shape() == shape) return x;
  Tensor r = x;
  while (r.dim() > shape.rank()) r = sum(r, 0, false);
  for (int i = 0; i < shape.rank(); ++i)
    if (shape[i] == 1 && r.shape()[i] != 1) r = sum(r, i, true);
  MINIDL_CHECK(r.shape() == shape, "sum_to: cannot reduce shape ", x.shape(), " to ", shape);
  return r;
}

Tensor argmax(const Tensor& x, int64_t dim) {
  profiler::RecordScope profile_scope("argmax", profiler::Kind::Op, {&x});
  check_defined(x, "argmax", "x");
  MINIDL_CHECK(x.dim() >= 1, "argmax: expected at least one dim, got a scalar");
  check_backend_computes(x, "argmax", "x");
  const int d = wrap_dim(dim, x.dim(), "argmax");
  MINIDL_CHECK(x.shape()[d] > 0, "argmax: dim ", d, " of shape ", x.shape(), " is empty");
  // Move dim d to the end, keeping the others in order (adjacent swaps), so rows are contiguous.
  Tensor moved = x.detach();
  for (int i = d; i + 1 < x.dim(); ++i) moved = transpose(moved, i, i + 1);
  moved = moved.contiguous();
  Shape out_shape = moved.shape();
  const int64_t cols = out_shape.back();
  out_shape.erase(out_shape.rank() - 1);
  Tensor out = empty(out_shape, TensorOptions(DType::Int64, x.device()));
  if (out.numel() == 0) return out;
  Tensor rows = make_view(moved, Shape{moved.numel() / cols, cols}, Shape{cols, 1}, moved.offset());
  Tensor out_rows = make_view(out, Shape{out.numel()}, Shape{1}, 0);
  backend_for(x.device()).argmax_rows(rows, out_rows);
  return out;
}

}  // namespace minidl::ops
