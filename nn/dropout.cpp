// nn::Dropout (ops::dropout with the module's training flag) and nn::Unflatten.
#include "nn/dropout.h"

#include <typeinfo>

#include "core/ops/dropout.h"

namespace minidl::nn {

Dropout::Dropout(double p) : p_(p) {
  MINIDL_CHECK(p >= 0 && p <= 1, "Dropout: probability must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return ops::dropout(x, p_, is_training()); }

std::string Dropout::name() const { return detail::make_message("Dropout(p=", p_, ")"); }

std::shared_ptr<Module> Dropout::clone() const {
  check_clone_is_exact(typeid(Dropout), "Dropout");
  auto copy = std::make_shared<Dropout>(p_);
  copy->copy_state_from(*this);
  return copy;
}

Unflatten::Unflatten(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {
  MINIDL_CHECK(!sizes_.empty(), "Unflatten: sizes must not be empty");
}

Tensor Unflatten::forward(const Tensor& x) {
  check_defined(x, "Unflatten", "x");
  const int d = wrap_dim(dim_, x.dim(), "Unflatten");
  int64_t product = 1;
  for (int64_t s : sizes_) product *= s;
  MINIDL_CHECK(product == x.shape()[d], "Unflatten: dim ", dim_, " of x ", x.shape(), " has size ", x.shape()[d],
               ", which the sizes given do not multiply to (", product, ")");
  Shape shape;
  for (int i = 0; i < x.dim(); ++i) {
    if (i == d) {
      for (int64_t s : sizes_) shape.push_back(s);
    } else {
      shape.push_back(x.shape()[i]);
    }
  }
  return x.reshape(shape);
}

std::shared_ptr<Module> Unflatten::clone() const {
  check_clone_is_exact(typeid(Unflatten), "Unflatten");
  auto copy = std::make_shared<Unflatten>(dim_, sizes_);
  copy->copy_state_from(*this);
  return copy;
}

}  // namespace minidl::nn
