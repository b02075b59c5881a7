// nn::LayerNorm: parameters as torch.nn.LayerNorm makes them, and a forward that checks the
// last dim and calls ops::layer_norm (which does the math).
#include "nn/layer_norm.h"

#include <cmath>
#include <typeinfo>

#include "core/ops/layer_norm.h"

namespace minidl::nn {

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : normalized_shape_(normalized_shape), eps_(eps), elementwise_affine_(elementwise_affine), with_bias_(with_bias) {
  MINIDL_CHECK(normalized_shape > 0, "LayerNorm: normalized_shape must be positive, got ", normalized_shape);
  MINIDL_CHECK(std::isfinite(eps) && eps >= 0, "LayerNorm: expected a finite eps >= 0, got ", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(Shape{normalized_shape}));
    if (with_bias) bias = register_parameter("bias", zeros(Shape{normalized_shape}));
  }
}

std::string LayerNorm::name() const {
  return detail::make_message("LayerNorm(", normalized_shape_, ", eps=", eps_,
                              ", elementwise_affine=", elementwise_affine_ ? "true" : "false",
                              elementwise_affine_ && !with_bias_ ? ", bias=false" : "", ")");
}

std::shared_ptr<Module> LayerNorm::clone() const {
  check_clone_is_exact(typeid(LayerNorm), "LayerNorm");
  auto copy = std::make_shared<LayerNorm>(normalized_shape_, eps_, elementwise_affine_, with_bias_);
  copy->copy_state_from(*this);
  return copy;
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_defined(x, "LayerNorm", "x");
  MINIDL_CHECK(x.dim() >= 1 && x.shape().back() == normalized_shape_, name(), ": expected input with last dim ",
               normalized_shape_, ", got shape ", x.shape());
  return ops::layer_norm(x, weight, bias, eps_);
}

}  // namespace minidl::nn
