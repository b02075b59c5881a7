// optim::Optimizer: parameter-group checks, zero_grad and the gradient fetch shared by the
// update loops.
#include "optim/optimizer.h"

#include <cmath>
#include <unordered_set>

namespace minidl::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::string optimizer)
    : groups_(std::move(groups)), name_(std::move(optimizer)) {
  size_t total = 0;
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    MINIDL_CHECK(std::isfinite(group.lr) && group.lr >= 0, name_, ": invalid learning rate ", group.lr,
                 " in param group ", g, " (expected a finite lr >= 0)");
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      MINIDL_CHECK(p.defined(), name_, ": param ", i, " of group ", g, " is an undefined tensor");
      MINIDL_CHECK(is_floating(p.dtype()), name_, ": param ", i, " of group ", g,
                   " must be float32 or float64, got ", p.dtype(), " with shape ", p.shape());
      MINIDL_CHECK(p.is_leaf(), name_, ": param ", i, " of group ", g, " (shape ", p.shape(),
                   ") is not a leaf tensor; optimizers update leaves (detach it first)");
      MINIDL_CHECK(seen.insert(p.impl()).second, name_, ": param ", i, " of group ", g, " (shape ", p.shape(),
                   ") appears more than once in the parameter groups");
    }
    total += group.params.size();
  }
  MINIDL_CHECK(total > 0, name_, ": got an empty parameter list");
}

Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (auto& group : groups_)
    for (auto& p : group.params) p.set_grad(Tensor());
}

Tensor Optimizer::gradient_for_update(const Tensor& param) const {
  Tensor grad = param.grad();
  if (!grad.defined()) return grad;
  MINIDL_CHECK(grad.shape() == param.shape() && grad.dtype() == param.dtype() && grad.device() == param.device(),
               name_, ": gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(),
               " does not match its parameter ", param.shape(), " ", param.dtype(), " on ", param.device());
  MINIDL_CHECK(param.is_contiguous(), name_, ": parameter of shape ", param.shape(),
               " is not contiguous; the fused update kernels need contiguous parameters");
  return grad.contiguous();
}

std::vector<ParamGroup> single_group(std::vector<Tensor> params, double lr) {
  std::vector<ParamGroup> groups;
  groups.push_back(ParamGroup{std::move(params), lr});
  return groups;
}

}  // namespace minidl::optim
