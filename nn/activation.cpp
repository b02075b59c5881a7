// nn::ReLU, nn::GELU and nn::Flatten forwards and clones.
#include "nn/activation.h"

#include <typeinfo>

#include "core/ops/elementwise.h"
#include "core/ops/gelu.h"

namespace minidl::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

std::shared_ptr<Module> ReLU::clone() const {
  check_clone_is_exact(typeid(ReLU), "ReLU");
  auto copy = std::make_shared<ReLU>();
  copy->copy_state_from(*this);  // the training flag
  return copy;
}

Tensor GELU::forward(const Tensor& x) { return ops::gelu(x, approximate_); }

std::string GELU::name() const {
  return detail::make_message("GELU(approximate='", gelu_approximate_name(approximate_), "')");
}

std::shared_ptr<Module> GELU::clone() const {
  check_clone_is_exact(typeid(GELU), "GELU");
  auto copy = std::make_shared<GELU>(approximate_);
  copy->copy_state_from(*this);
  return copy;
}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim_, end_dim_); }

std::shared_ptr<Module> Flatten::clone() const {
  check_clone_is_exact(typeid(Flatten), "Flatten");
  auto copy = std::make_shared<Flatten>(start_dim_, end_dim_);
  copy->copy_state_from(*this);
  return copy;
}

}  // namespace minidl::nn
