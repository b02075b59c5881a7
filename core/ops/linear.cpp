// matmul and linear, with their gradients.
//   matmul: C[M,N] = A[M,K]·B[K,N];  dA = dC·Bᵀ, dB = Aᵀ·dC.
//   linear: y[N,M] = x[N,K]·W[M,K]ᵀ + b[M] (optionally relu'd, fused in the epilogue);
//           with dy (masked by y > 0 when relu was fused): dx = dy·W, dW = dyᵀ·x, db = Σ_rows dy.
// The transposes are flags to the GEMM, never copies.
#include "core/ops/linear.h"

#include "core/autograd.h"
#include "core/backend.h"

namespace minidl::ops {

namespace {

void check_float_matrix(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  MINIDL_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' must be float32 or float64, got ", t.dtype(),
               " with shape ", t.shape());
}

struct MatmulBackward final : Node {
  Tensor a, b;
  std::vector<Tensor> apply(const Tensor& g) override {
    const Tensor gc = g.contiguous();
    Tensor da, db;
    if (next_edges[0].valid()) {
      da = empty(a.shape(), a.options());
      backend_for(a.device()).matmul(gc, b, da, false, true);
    }
    if (next_edges[1].valid()) {
      db = empty(b.shape(), b.options());
      backend_for(b.device()).matmul(a, gc, db, true, false);
    }
    return {da, db};
  }
  void release_saved() override { a = b = Tensor(); }
  std::string name() const override { return "MatmulBackward"; }
};

struct LinearBackward final : Node {
  Tensor x, w, y;  // y saved only when relu was fused
  bool has_bias = false;
  std::vector<Tensor> apply(const Tensor& g) override {
    Backend& be = backend_for(x.device());
    Tensor dy = g.contiguous();
    if (y.defined()) {
      Tensor masked = empty(dy.shape(), dy.options());
      be.relu_backward(dy, y, masked);
      dy = masked;
    }
    Tensor dx = next_edges[0].valid() ? empty(x.shape(), x.options()) : Tensor();
    Tensor dw = next_edges[1].valid() ? empty(w.shape(), w.options()) : Tensor();
    Tensor db = has_bias && next_edges[2].valid() ? empty(Shape{w.shape()[0]}, w.options()) : Tensor();
    be.linear_backward(dy, x, w, dx, dw, db);
    return {dx, dw, db};
  }
  void release_saved() override { x = w = y = Tensor(); }
  std::string name() const override { return "LinearBackward"; }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_float_matrix(a, "matmul", "a");
  check_float_matrix(b, "matmul", "b");
  check_same_device({&a, &b}, "matmul");
  MINIDL_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: expected 2-D tensors, got ", a.shape(), " and ", b.shape());
  MINIDL_CHECK(a.shape()[1] == b.shape()[0], "matmul: inner dimensions differ: a is ", a.shape(), ", b is ", b.shape(),
               " (expected a [M, K] and b [K, N])");
  MINIDL_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ (", a.dtype(), " and ", b.dtype(), ")");
  check_backend_computes(a, "matmul", "a");
  const Tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
  Tensor c = empty(Shape{a.shape()[0], b.shape()[1]}, a.options());
  if (c.numel() > 0) backend_for(a.device()).matmul(ac, bc, c, false, false);
  if (autograd::any_requires_grad({&a, &b})) {
    auto node = std::make_shared<MatmulBackward>();
    node->a = ac;
    node->b = bc;
    autograd::attach(node, {&a, &b}, c);
  }
  return c;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  check_float_matrix(x, "linear", "x");
  check_float_matrix(w, "linear", "weight");
  check_same_device({&x, &w, &b}, "linear");
  MINIDL_CHECK(x.dim() == 2 && w.dim() == 2, "linear: expected x [N, in] and weight [out, in], got x ", x.shape(),
               " and weight ", w.shape());
  MINIDL_CHECK(x.shape()[1] == w.shape()[1], "linear: x has ", x.shape()[1], " features (shape ", x.shape(),
               ") but weight expects ", w.shape()[1], " (shape ", w.shape(), ")");
  MINIDL_CHECK(x.dtype() == w.dtype(), "linear: x is ", x.dtype(), " but weight is ", w.dtype());
  if (b.defined()) {
    MINIDL_CHECK(b.dim() == 1 && b.shape()[0] == w.shape()[0], "linear: bias has shape ", b.shape(), ", expected [",
                 w.shape()[0], "] for weight ", w.shape());
    MINIDL_CHECK(b.dtype() == w.dtype(), "linear: bias is ", b.dtype(), " but weight is ", w.dtype());
  }
  check_backend_computes(x, "linear", "x");
  const Tensor xc = x.detach().contiguous(), wc = w.detach().contiguous();
  const Tensor bc = b.defined() ? b.detach().contiguous() : Tensor();
  Tensor y = empty(Shape{x.shape()[0], w.shape()[0]}, x.options());
  if (y.numel() > 0) backend_for(x.device()).linear_forward(xc, wc, bc, y, relu ? Activation::ReLU : Activation::None);
  if (autograd::any_requires_grad({&x, &w, &b})) {
    auto node = std::make_shared<LinearBackward>();
    node->x = xc;
    node->w = wc;
    if (relu) node->y = y.detach();
    node->has_bias = b.defined();
    autograd::attach(node, {&x, &w, &b}, y);
  }
  return y;
}

}  // namespace minidl::ops
