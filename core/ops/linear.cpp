// matmul and linear, with their gradients.
//   matmul: C[..., M, N] = A[..., M, K]·B[..., K, N], the batch dims broadcast (torch.matmul);
//           dA = sum_to(dC·Bᵀ), dB = sum_to(Aᵀ·dC) over the batch dims each operand was
//           broadcast along. A 1-D operand gets a dim of 1 (prepended for A, appended for B)
//           that the result drops again.
//   linear: y[N,M] = act(z), z = x[N,K]·W[M,K]ᵀ + b[M], act fused in the GEMM's epilogue: the
//           identity, ReLU (linear(..., relu=true)) or GELU (linear_gelu, which keeps z too);
//           with dz = dy (masked by y > 0 after a ReLU, times gelu'(z) after a GELU):
//           dx = dz·W, dW = dzᵀ·x, db = Σ_rows dz.
//           x [..., K] is flattened to [N, K] (a view when x is contiguous).
// The transposes are flags to the GEMM, never copies: Note [matmul operands in place].
#include "core/ops/linear.h"

#include <algorithm>
#include <optional>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops/reduce.h"
#include "core/profiler.h"

namespace minidl::ops {

namespace {

void check_float_matrix(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  MINIDL_CHECK(is_floating(t.dtype()), op, ": argument '", arg, "' must be a floating dtype (float32, float64, bfloat16, float16), got ", t.dtype(),
               " with shape ", t.shape());
}

// Note [matmul operands in place]
// The batched GEMM (Backend::matmul_batched) reads matrix i of an operand at i·batch_stride
// from its first element, row-major with a row stride, or column-major (a transposed view, such
// as k.transpose(-2, -1)) with a column stride. So an operand is passed as it lies whenever
//   - its last two dims have unit stride along one of them (the other is the leading
//     dimension), which covers contiguous tensors, their transposes and narrowed windows; and
//   - its batch dims, broadcast to the result's, step by one stride: matrix i of the flattened
//     batch at i·s (a contiguous batch, or s = 0 for an operand broadcast along all of them).
// Anything else is copied: first the matrix dims (before broadcasting, so the copy is of the
// operand's own size), then, when only the batch dims disagree (an operand broadcast along
// some batch dims but not others), the broadcast operand as a whole.

// How the GEMM reads a [rows, cols] matrix with strides (rs, cs), if it can.
struct MatrixLayout {
  bool readable = false;
  bool transposed = false;  // column-major: the GEMM's trans flag
  int64_t ld = 0;           // the stride between rows (row-major) or columns (transposed)
};

MatrixLayout matrix_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  // A dim of size 1 is never stepped along, so its stride does not matter.
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) return {true, false, rows == 1 ? cols : rs};
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) return {true, true, cols == 1 ? rows : cs};
  return {};
}

// The stride s with which matrix i of the row-major flattened batch starts at i·s, if one exists.
std::optional<int64_t> uniform_batch_stride(const Tensor& x, int batch_dims) {
  std::optional<int64_t> stride;
  int64_t next = 0;  // the stride the next outer dim must have
  for (int d = batch_dims - 1; d >= 0; --d) {
    const int64_t size = x.shape()[d], s = x.strides()[d];
    if (size == 1) continue;
    if (!stride) stride = s;
    else if (s != next) return std::nullopt;
    next = s * size;
  }
  return stride.value_or(0);
}

// An operand [..., rows, cols] expanded to batch shape `batch` and described for the GEMM:
// `data` holds matrix 0 at its first element (Note [matmul operands in place]).
struct GemmOperand {
  Tensor data;
  int64_t batch_stride = 0;
  MatrixLayout layout;
};

GemmOperand gemm_operand(Tensor x, const Shape& batch) {
  const int r = x.dim();
  const int64_t rows = x.shape()[r - 2], cols = x.shape()[r - 1];
  if (!matrix_layout(rows, cols, x.strides()[r - 2], x.strides()[r - 1]).readable) x = x.contiguous();
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  x = x.expand(full);
  std::optional<int64_t> stride = uniform_batch_stride(x, batch.rank());
  if (!stride) {
    x = x.contiguous();
    stride = rows * cols;
  }
  const int n = x.dim();
  return {x, *stride, matrix_layout(rows, cols, x.strides()[n - 2], x.strides()[n - 1])};
}

// C[batch..., M, N] = a[..., M, K] · b[..., K, N] (both >= 2-D, checked), outside autograd.
Tensor batched_product(const Tensor& a, const Tensor& b) {
  const int ra = a.dim(), rb = b.dim();
  Shape batch_a, batch_b;
  for (int d = 0; d < ra - 2; ++d) batch_a.push_back(a.shape()[d]);
  for (int d = 0; d < rb - 2; ++d) batch_b.push_back(b.shape()[d]);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul (the batch dims, all but the last two)");
  const int64_t m = a.shape()[ra - 2], k = a.shape()[ra - 1], n = b.shape()[rb - 1];
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor c = empty(out_shape, a.options());
  if (c.numel() == 0) return c;
  Backend& be = backend_for(a.device());
  if (k == 0) {  // the empty sum
    be.fill(c, 0.0);
    return c;
  }
  const GemmOperand oa = gemm_operand(a.detach(), batch), ob = gemm_operand(b.detach(), batch);
  Backend::BatchedMatmul p;
  p.batch = batch.numel();
  p.m = m;
  p.n = n;
  p.k = k;
  p.stride_a = oa.batch_stride;
  p.lda = oa.layout.ld;
  p.trans_a = oa.layout.transposed;
  p.stride_b = ob.batch_stride;
  p.ldb = ob.layout.ld;
  p.trans_b = ob.layout.transposed;
  be.matmul_batched(oa.data, ob.data, c, p);
  return c;
}

struct MatmulBackward final : Node {
  Tensor a, b;  // the >= 2-D operands as given (views are kept, not copied)
  std::vector<Tensor> apply(const Tensor& g) override {
    Tensor da, db;
    // dA = dC·Bᵀ and dB = Aᵀ·dC, batched like the forward; the transposes are views.
    if (next_edges[0].valid()) da = ops::sum_to(batched_product(g, b.transpose(-2, -1)), a.shape());
    if (next_edges[1].valid()) db = ops::sum_to(batched_product(a.transpose(-2, -1), g), b.shape());
    return {da, db};
  }
  void release_saved() override { a = b = Tensor(); }
  std::string name() const override { return "MatmulBackward"; }
};

struct LinearBackward final : Node {
  Tensor x, w;
  Tensor y;  // saved only after a ReLU: its mask
  Tensor z;  // saved only after a GELU: the pre-activation its derivative needs
  Activation act = Activation::None;
  bool has_bias = false;
  std::vector<Tensor> apply(const Tensor& g) override {
    Backend& be = backend_for(x.device());
    Tensor dy = g.contiguous();
    if (act == Activation::ReLU) {
      Tensor masked = empty(dy.shape(), dy.options());
      be.relu_backward(dy, y, masked);
      dy = masked;
    } else if (is_gelu(act)) {
      Tensor dz = empty(dy.shape(), dy.options());
      be.gelu_backward(dy, z, dz, gelu_form(act));
      dy = dz;
    }
    Tensor dx = next_edges[0].valid() ? empty(x.shape(), x.options()) : Tensor();
    Tensor dw = next_edges[1].valid() ? empty(w.shape(), w.options()) : Tensor();
    Tensor db = has_bias && next_edges[2].valid() ? empty(Shape{w.shape()[0]}, w.options()) : Tensor();
    be.linear_backward(dy, x, w, dx, dw, db);
    return {dx, dw, db};
  }
  void release_saved() override { x = w = y = z = Tensor(); }
  std::string name() const override { return "LinearBackward"; }
};

// y [N, M] = act(x [N, K]·wᵀ (+ b)) on arguments linear() has validated, with the autograd node.
Tensor linear_rows(const Tensor& x, const Tensor& w, const Tensor& b, Activation act) {
  const Tensor xc = x.detach().contiguous(), wc = w.detach().contiguous();
  const Tensor bc = b.defined() ? b.detach().contiguous() : Tensor();
  Tensor y = empty(Shape{x.shape()[0], w.shape()[0]}, x.options());
  Tensor z = is_gelu(act) ? empty(y.shape(), y.options()) : Tensor();
  if (y.numel() > 0) backend_for(x.device()).linear_forward(xc, wc, bc, y, act, z.defined() ? &z : nullptr);
  if (autograd::any_requires_grad({&x, &w, &b})) {
    auto node = std::make_shared<LinearBackward>();
    node->x = xc;
    node->w = wc;
    node->act = act;
    if (act == Activation::ReLU) node->y = y.detach();
    node->z = z;
    node->has_bias = b.defined();
    autograd::attach(node, {&x, &w, &b}, y);
  }
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto cast = autocast::cast_inputs("matmul", {&a, &b})) return matmul((*cast)[0], (*cast)[1]);
  profiler::RecordScope profile_scope("matmul", profiler::Kind::Op, {&a, &b});
  check_float_matrix(a, "matmul", "a");
  check_float_matrix(b, "matmul", "b");
  check_same_device({&a, &b}, "matmul");
  MINIDL_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got ", a.shape(), " and ",
               b.shape());
  MINIDL_CHECK(a.dtype() == b.dtype(), "matmul: dtypes differ (", a.dtype(), " and ", b.dtype(), ")");
  // A 1-D a is a row [1, K], a 1-D b a column [K, 1]; the result drops that dim again.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t ka = a2.shape()[a2.dim() - 1], kb = b2.shape()[b2.dim() - 2];
  MINIDL_CHECK(ka == kb, "matmul: inner dimensions differ: a is ", a.shape(), ", b is ", b.shape(),
               " (expected a [..., M, K] and b [..., K, N])");
  MINIDL_CHECK(std::max(a2.dim(), b2.dim()) <= Shape::kMaxRank, "matmul: a ", a.shape(), " and b ", b.shape(),
               " need more than ", Shape::kMaxRank, " dims");
  check_backend_computes(a, "matmul", "a");
  if (a2.dim() >= 3 && b2.dim() == 2 && a2.is_contiguous()) {
    // torch.matmul's fold: a batch against one matrix, a [..., M, K] · b [K, N], is the single
    // product [(...)·M, K] · [K, N] when a's rows follow one another in memory (a view, no
    // copy). One larger GEMM instead of a batch of small ones, and in the backward dB is one
    // GEMM over all the rows instead of a [K, N] product per matrix summed afterwards.
    Shape out_shape = a2.shape();
    out_shape[out_shape.rank() - 1] = b2.shape()[1];
    int64_t rows = 1;
    for (int d = 0; d < a2.dim() - 1; ++d) rows *= a2.shape()[d];
    Tensor c = matmul(a2.reshape(Shape{rows, ka}), b2).reshape(out_shape);
    if (b.dim() == 1) c = c.squeeze(-1);
    return c;
  }
  Tensor c = batched_product(a2, b2);  // throws naming matmul and the batch dims when they do not broadcast
  if (autograd::any_requires_grad({&a2, &b2})) {
    auto node = std::make_shared<MatmulBackward>();
    node->a = a2.detach();
    node->b = b2.detach();
    autograd::attach(node, {&a2, &b2}, c);
  }
  if (a.dim() == 1) c = c.squeeze(-2);
  if (b.dim() == 1) c = c.squeeze(-1);
  return c;
}

namespace {

// The one shape check of a linear layer: nn::Linear and nn::functional::linear call this op
// and rely on its messages (nn::Linear adds the layer's name in front). `op` names the caller.
Tensor linear_with(const Tensor& x, const Tensor& w, const Tensor& b, Activation act, const char* op) {
  profiler::RecordScope profile_scope(op, profiler::Kind::Op, {&x, &w, &b});
  check_float_matrix(x, op, "x");
  check_float_matrix(w, op, "weight");
  check_same_device({&x, &w, &b}, op);
  MINIDL_CHECK(x.dim() >= 1 && w.dim() == 2, op, ": expected x [..., in_features] and weight [out_features, ",
               "in_features], got x ", x.shape(), " and weight ", w.shape());
  MINIDL_CHECK(x.shape()[x.dim() - 1] == w.shape()[1], op, ": expected x with last dim ", w.shape()[1],
               " (the in_features of weight ", w.shape(), "), got x ", x.shape());
  MINIDL_CHECK(x.dtype() == w.dtype(), op, ": x is ", x.dtype(), " but weight is ", w.dtype());
  if (b.defined()) {
    MINIDL_CHECK(b.dim() == 1 && b.shape()[0] == w.shape()[0], op, ": bias has shape ", b.shape(), ", expected [",
                 w.shape()[0], "] for weight ", w.shape());
    MINIDL_CHECK(b.dtype() == w.dtype(), op, ": bias is ", b.dtype(), " but weight is ", w.dtype());
  }
  check_backend_computes(x, op, "x");
  if (x.dim() == 2) return linear_rows(x, w, b, act);
  // x [..., in] as rows [N, in] (a view when x is contiguous; linear_rows copies otherwise
  // anyway); the output takes x's leading dims back. Autograd runs through both reshapes.
  Shape out_shape = x.shape();
  out_shape[out_shape.rank() - 1] = w.shape()[0];
  int64_t rows = 1;
  for (int d = 0; d < x.dim() - 1; ++d) rows *= x.shape()[d];
  return linear_rows(x.reshape(Shape{rows, w.shape()[1]}), w, b, act).reshape(out_shape);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  if (auto cast = autocast::cast_inputs("linear", {&x, &w, &b})) return linear((*cast)[0], (*cast)[1], (*cast)[2], relu);
  return linear_with(x, w, b, relu ? Activation::ReLU : Activation::None, "linear");
}

Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, GeluApproximate approximate) {
  // Autocast treats it as the linear it starts with; the GELU then runs in the linear's dtype,
  // as a separate gelu would on that linear's output.
  if (auto cast = autocast::cast_inputs("linear", {&x, &w, &b}))
    return linear_gelu((*cast)[0], (*cast)[1], (*cast)[2], approximate);
  MINIDL_CHECK(approximate == GeluApproximate::None || approximate == GeluApproximate::Tanh,
               "linear_gelu: approximate must be GeluApproximate::None or GeluApproximate::Tanh, got ",
               static_cast<int>(approximate));
  return linear_with(x, w, b, approximate == GeluApproximate::Tanh ? Activation::GELUTanh : Activation::GELU,
                     "linear_gelu");
}

}  // namespace minidl::ops
