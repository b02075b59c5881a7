// nn::functional: thin wrappers over core ops; linear handles inputs of any rank >= 1.
#include "nn/functional.h"

#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/reduce.h"

namespace minidl::nn::functional {

namespace {

Tensor linear_any_rank(const Tensor& x, const Tensor& w, const Tensor& b, bool fuse_relu) {
  check_defined(x, "linear", "x");
  check_defined(w, "linear", "w");
  MINIDL_CHECK(w.dim() == 2, "linear: weight must be [out, in], got shape ", w.shape());
  MINIDL_CHECK(x.dim() >= 1, "linear: input must have rank >= 1, got a scalar");
  MINIDL_CHECK(x.shape().back() == w.size(1), "linear: input last dim ", x.shape().back(), " (input shape ", x.shape(),
               ") does not match the weight's in_features ", w.size(1), " (weight shape ", w.shape(), ")");
  if (x.dim() == 2) return ops::linear(x, w, b, fuse_relu);
  int64_t rows = 1;  // product of the leading dims
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  Tensor y = ops::linear(x.reshape(Shape{rows, w.size(1)}), w, b, fuse_relu);  // [rows, out]
  Shape out_shape = x.shape();
  out_shape[out_shape.rank() - 1] = w.size(0);  // [..., out]
  return y.reshape(out_shape);
}

}  // namespace

Tensor relu(const Tensor& x) { return ops::relu(x); }
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return linear_any_rank(x, w, b, false); }
Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& b) { return linear_any_rank(x, w, b, true); }

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, ops::Reduction r,
                     const ops::CrossEntropyOptions& options) {
  return ops::softmax_cross_entropy(logits, targets, r, ops::CrossEntropyGrad::Fused, options);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, ops::Reduction r) {
  check_defined(input, "mse_loss", "input");
  check_defined(target, "mse_loss", "target");
  MINIDL_CHECK(input.shape() == target.shape(), "mse_loss: input shape ", input.shape(), " and target shape ",
               target.shape(), " must be equal");
  MINIDL_CHECK(input.dtype() == target.dtype(), "mse_loss: input dtype ", input.dtype(), " and target dtype ",
               target.dtype(), " must be equal");
  const Tensor diff = ops::sub(input, target);
  const Tensor squared = ops::mul(diff, diff);
  switch (r) {
    case ops::Reduction::Mean: return ops::mean(squared);
    case ops::Reduction::Sum: return ops::sum(squared);
    case ops::Reduction::None: return squared;
  }
  throw Error("mse_loss: unknown reduction");
}

}  // namespace minidl::nn::functional
