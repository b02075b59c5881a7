// Elementwise ops with broadcasting, and their gradients.
//   out = a ⊙ b over broadcast(a.shape, b.shape); inputs reach the kernel as expanded views
//   (stride 0 along broadcast dims), so no broadcast copy is ever made.
//   d(a+b) = (g, g); d(a-b) = (g, -g); d(a*b) = (g*b, g*a); d(a/b) = (g/b, -g*a/b²),
//   each summed back to its input's shape (sum_to) when the input was broadcast.
//   relu: y = max(x, 0); dx = g where y > 0.
//   Floating inputs of different dtypes are promoted first (promote_types: float32 + bfloat16
//   runs in float32), through differentiable casts, so each gradient returns in its input's dtype.
//   PyTorch's rule for a 0-dim operand holds too: it does not decide the dtype of a result with
//   dimensions (a bfloat16 tensor times a float32 scalar is bfloat16), but its value takes part
//   unrounded: the op runs in the wider dtype and the result is rounded once. The scalar
//   overloads (x * 0.1) pass a float32 0-dim tensor for a 16-bit x, so they follow the same path.
#include "core/ops/elementwise.h"

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

// Runs the kernel only (no autograd): shapes are broadcast, inputs passed as expanded views.
Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_defined(a, name, "a");
  check_defined(b, name, "b");
  check_same_device({&a, &b}, name);
  MINIDL_CHECK(a.dtype() == b.dtype(), name, ": dtypes differ (", a.dtype(), " with shape ", a.shape(), " and ",
               b.dtype(), " with shape ", b.shape(), "); convert one with .to(dtype)");
  check_backend_computes(a, name, "a");
  const Shape out_shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(out_shape, a.options());
  if (out.numel() == 0) return out;
  const Tensor ax = a.shape() == out_shape ? a.detach() : expand(a.detach(), out_shape);
  const Tensor bx = b.shape() == out_shape ? b.detach() : expand(b.detach(), out_shape);
  backend_for(a.device()).binary(op, ax, bx, out);
  return out;
}

struct AddSubBackward final : Node {
  Shape a_shape, b_shape;
  bool subtract = false;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga = next_edges[0].valid() ? sum_to(g, a_shape) : Tensor();
    Tensor gb;
    if (next_edges[1].valid()) gb = subtract ? sum_to(-g, b_shape) : sum_to(g, b_shape);
    return {ga, gb};
  }
  std::string name() const override { return subtract ? "SubBackward" : "AddBackward"; }
};

struct MulBackward final : Node {
  Tensor a, b;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga = next_edges[0].valid() ? sum_to(mul(g, b), a.shape()) : Tensor();
    Tensor gb = next_edges[1].valid() ? sum_to(mul(g, a), b.shape()) : Tensor();
    return {ga, gb};
  }
  void release_saved() override { a = b = Tensor(); }
  std::string name() const override { return "MulBackward"; }
};

struct DivBackward final : Node {
  Tensor a, b;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor ga = next_edges[0].valid() ? sum_to(div(g, b), a.shape()) : Tensor();
    Tensor gb = next_edges[1].valid() ? sum_to(-div(mul(g, a), mul(b, b)), b.shape()) : Tensor();
    return {ga, gb};
  }
  void release_saved() override { a = b = Tensor(); }
  std::string name() const override { return "DivBackward"; }
};

struct ReluBackward final : Node {
  Tensor y;
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor dx = empty(y.shape(), y.options());
    if (dx.numel() > 0) backend_for(y.device()).relu_backward(g.contiguous(), y, dx);
    return {dx};
  }
  void release_saved() override { y = Tensor(); }
  std::string name() const override { return "ReluBackward"; }
};

// Whether a and b are floating tensors of different dtypes, which run in promote_types of them.
bool needs_promotion(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() != b.dtype() && is_floating(a.dtype()) && is_floating(b.dtype());
}

// The dtype of the result: the dimensioned operand's when the other is 0-dim, else the promoted one.
DType result_dtype(const Tensor& a, const Tensor& b) {
  if ((a.dim() == 0) != (b.dim() == 0)) return a.dim() == 0 ? b.dtype() : a.dtype();
  return promote_types(a.dtype(), b.dtype());
}

// Runs op(a, b) in the promoted dtype and rounds the result into result_dtype(a, b).
template <typename Op>
Tensor promoted(const Tensor& a, const Tensor& b, Op op) {
  const DType compute = promote_types(a.dtype(), b.dtype()), result = result_dtype(a, b);
  const Tensor r = op(to(a, a.device(), compute), to(b, b.device(), compute));
  return result == compute ? r : to(r, r.device(), result);
}

Tensor add_or_sub(const Tensor& a, const Tensor& b, bool subtract) {
  if (needs_promotion(a, b))
    return promoted(a, b, [subtract](const Tensor& x, const Tensor& y) { return add_or_sub(x, y, subtract); });
  Tensor out = binary_kernel(subtract ? BinaryOp::Sub : BinaryOp::Add, a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    auto node = std::make_shared<AddSubBackward>();
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    node->subtract = subtract;
    autograd::attach(node, {&a, &b}, out);
  }
  return out;
}

template <typename NodeT>
Tensor mul_or_div(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (needs_promotion(a, b))
    return promoted(a, b, [op](const Tensor& x, const Tensor& y) { return mul_or_div<NodeT>(op, x, y); });
  Tensor out = binary_kernel(op, a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    auto node = std::make_shared<NodeT>();
    node->a = a.detach();
    node->b = b.detach();
    autograd::attach(node, {&a, &b}, out);
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("add", profiler::Kind::Op, {&a, &b}); return add_or_sub(a, b, false); }
Tensor sub(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("sub", profiler::Kind::Op, {&a, &b}); return add_or_sub(a, b, true); }
Tensor mul(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("mul", profiler::Kind::Op, {&a, &b}); return mul_or_div<MulBackward>(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("div", profiler::Kind::Op, {&a, &b}); return mul_or_div<DivBackward>(BinaryOp::Div, a, b); }

Tensor relu(const Tensor& x) {
  profiler::RecordScope profile_scope("relu", profiler::Kind::Op, {&x});
  check_defined(x, "relu", "x");
  MINIDL_CHECK(is_floating(x.dtype()), "relu: expected a floating tensor, got ", x.dtype(), " with shape ", x.shape());
  check_backend_computes(x, "relu", "x");
  const Tensor xc = x.detach().contiguous();
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0) backend_for(x.device()).relu_forward(xc, y);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<ReluBackward>();
    node->y = y.detach();
    autograd::attach(node, {&x}, y);
  }
  return y;
}

Tensor eq(const Tensor& a, const Tensor& b) {
  profiler::RecordScope profile_scope("eq", profiler::Kind::Op, {&a, &b});
  check_defined(a, "eq", "a");
  check_defined(b, "eq", "b");
  check_same_device({&a, &b}, "eq");
  MINIDL_CHECK(a.dtype() == b.dtype(), "eq: dtypes differ (", a.dtype(), " with shape ", a.shape(), " and ", b.dtype(),
               " with shape ", b.shape(), ")");
  const Shape out_shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), "eq");
  Tensor out = empty(out_shape, TensorOptions(DType::Float32, a.device()));
  if (out.numel() == 0) return out;
  const Tensor ac = expand(a.detach(), out_shape).contiguous();
  const Tensor bc = expand(b.detach(), out_shape).contiguous();
  backend_for(a.device()).equal(ac, bc, out);
  return out;
}

}  // namespace minidl::ops

namespace minidl {

Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }

namespace {
// The scalar operand of x op v: in x's dtype, but float32 for a 16-bit x, so that v is not
// rounded to 16 bits first (x / 1e5 in float16 would divide by Inf); the product is then
// rounded once into x's dtype (the 0-dim rule above).
Tensor scalar_like(double v, const Tensor& t) {
  check_defined(t, "scalar op", "tensor");
  return scalar_tensor(v, t.options().with_dtype(compute_dtype(t.dtype())));
}
}  // namespace

Tensor operator+(const Tensor& a, double b) { return ops::add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return ops::sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return ops::mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return ops::div(a, scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return ops::add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return ops::sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return ops::mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return ops::div(scalar_like(a, b), b); }
Tensor operator-(const Tensor& a) { return ops::mul(a, scalar_like(-1.0, a)); }

}  // namespace minidl
