// nn::Linear: parameter set-up (PyTorch's reset_parameters order: weight, then bias) and a
// forward that delegates to functional::linear.
#include "nn/linear.h"

#include <cmath>
#include <typeinfo>

#include "nn/functional.h"
#include "nn/init.h"

namespace minidl::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator* gen)
    : in_features_(in_features), out_features_(out_features) {
  MINIDL_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
               in_features, " and ", out_features);
  Tensor w = empty(Shape{out_features, in_features});  // [out, in]
  init::kaiming_uniform_(w, std::sqrt(5.0), gen);
  weight = register_parameter("weight", w);
  if (with_bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    Tensor b = empty(Shape{out_features});  // [out]
    init::uniform_(b, -bound, bound, gen);
    bias = register_parameter("bias", b);
  }
}

std::string Linear::name() const {
  return detail::make_message("Linear(in_features=", in_features_, ", out_features=", out_features_,
                              ", bias=", bias.defined() ? "true" : "false", ")");
}

void Linear::check_input(const Tensor& x) const {
  check_defined(x, "Linear", "x");
  MINIDL_CHECK(x.dim() >= 1 && x.shape().back() == in_features_, name(), ": expected input with last dim ",
               in_features_, ", got shape ", x.shape());
}

std::shared_ptr<Module> Linear::clone() const {
  check_clone_is_exact(typeid(Linear), "Linear");
  Generator scratch;  // the initial values are overwritten: keep the default generator untouched
  auto copy = std::make_shared<Linear>(in_features_, out_features_, bias.defined(), &scratch);
  copy->copy_state_from(*this);
  return copy;
}

Tensor Linear::forward(const Tensor& x) {
  check_input(x);
  return functional::linear(x, weight, bias);
}

Tensor Linear::forward_relu(const Tensor& x) {
  check_input(x);
  return functional::linear_relu(x, weight, bias);
}

}  // namespace minidl::nn
