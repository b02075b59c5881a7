// nn::functional: thin wrappers over core ops, which validate their arguments.
#include "nn/functional.h"

#include "core/autocast.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/reduce.h"

namespace minidl::nn::functional {

Tensor relu(const Tensor& x) { return ops::relu(x); }
// ops::linear validates the arguments and flattens x's leading dims itself.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) { return ops::linear(x, w, b, false); }
Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& b) { return ops::linear(x, w, b, true); }
Tensor linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, GeluApproximate approximate) {
  return ops::linear_gelu(x, w, b, approximate);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, ops::Reduction r,
                     const ops::CrossEntropyOptions& options) {
  return ops::softmax_cross_entropy(logits, targets, r, ops::CrossEntropyGrad::Fused, options);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, ops::Reduction r) {
  if (auto cast = autocast::cast_inputs("mse_loss", {&input, &target})) return mse_loss((*cast)[0], (*cast)[1], r);
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
