// nn::Linear: parameter set-up (PyTorch's reset_parameters order: weight, then bias) and a
// forward that delegates to functional::linear, whose op checks the shapes; the layer puts its
// own name in front of the op's error, so a model with several Linear layers shows which one.
#include "nn/linear.h"

#include <cmath>
#include <optional>
#include <typeinfo>

#include "core/profiler.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace minidl::nn {

namespace {

// call(), with a minidl::Error it throws prefixed by the layer's name: ops::linear checks the
// shapes and names linear, x and weight; the prefix says which layer of the model it was.
template <typename Call>
Tensor naming_layer(const Module& layer, Call&& call) {
  try {
    return call();
  } catch (const OutOfMemory&) {
    throw;  // keeps its type: callers catch OutOfMemory by name
  } catch (const Error& e) {
    throw Error(detail::make_message(layer.name(), ": ", e.what()));
  }
}

}  // namespace

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

std::shared_ptr<Module> Linear::clone() const {
  check_clone_is_exact(typeid(Linear), "Linear");
  Generator scratch;  // the initial values are overwritten: keep the default generator untouched
  auto copy = std::make_shared<Linear>(in_features_, out_features_, bias.defined(), &scratch);
  copy->copy_state_from(*this);
  return copy;
}

Tensor Linear::forward(const Tensor& x) {
  return naming_layer(*this, [&] { return functional::linear(x, weight, bias); });
}

// The fused calls open the profiler range operator() would open for this layer, named after the
// layer and the activation that ran in its epilogue.
Tensor Linear::forward_relu(const Tensor& x) {
  std::optional<profiler::RecordScope> scope;
  if (profiler::active()) scope.emplace(profile_label() + " + ReLU", profiler::Kind::Module, std::initializer_list<const Tensor*>{&x});
  return naming_layer(*this, [&] { return functional::linear_relu(x, weight, bias); });
}

Tensor Linear::forward_gelu(const Tensor& x, GeluApproximate approximate) {
  std::optional<profiler::RecordScope> scope;
  if (profiler::active()) scope.emplace(profile_label() + " + GELU", profiler::Kind::Module, std::initializer_list<const Tensor*>{&x});
  return naming_layer(*this, [&] { return functional::linear_gelu(x, weight, bias, approximate); });
}

}  // namespace minidl::nn
