// optim::Optimizer: parameter-group checks, each group's options completed from the optimizer's,
// zero_grad and the gradient fetch shared by the update loops.
#include "optim/optimizer.h"

#include <cmath>
#include <optional>
#include <unordered_set>

#include "core/profiler.h"

namespace minidl::optim {

namespace {

// PyTorch's rule for one option of a group: the group's own value, else the optimizer's. An
// option the optimizer does not have (unset in its defaults) may not be set by a group.
template <typename T>
void inherit_option(std::optional<T>& group_value, const std::optional<T>& optimizer_value, const char* option,
                    const std::string& optimizer, size_t g) {
  MINIDL_CHECK(optimizer_value.has_value() || !group_value.has_value(), optimizer, ": param group ", g, " sets ",
               option, ", which ", optimizer, " does not have");
  if (!group_value.has_value()) group_value = optimizer_value;
}

void complete_group_options(GroupOptions& group, const GroupOptions& defaults, const std::string& optimizer, size_t g) {
  inherit_option(group.lr, defaults.lr, "lr", optimizer, g);
  inherit_option(group.weight_decay, defaults.weight_decay, "weight_decay", optimizer, g);
  inherit_option(group.beta1, defaults.beta1, "beta1", optimizer, g);
  inherit_option(group.beta2, defaults.beta2, "beta2", optimizer, g);
  inherit_option(group.eps, defaults.eps, "eps", optimizer, g);
  inherit_option(group.momentum, defaults.momentum, "momentum", optimizer, g);
  inherit_option(group.dampening, defaults.dampening, "dampening", optimizer, g);
  inherit_option(group.nesterov, defaults.nesterov, "nesterov", optimizer, g);
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::string optimizer, const GroupOptions& defaults)
    : groups_(std::move(groups)), name_(std::move(optimizer)) {
  MINIDL_INTERNAL_ASSERT(defaults.lr.has_value(), name_, ": every optimizer has an lr");
  size_t total = 0;
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    complete_group_options(group.options, defaults, name_, g);
    group.lr = group.options.lr.value_or(0.0);
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
  // Gradients become undefined (PyTorch's set_to_none=True): no memory is written, nothing is
  // launched on a device, and the next backward allocates them afresh.
  std::optional<profiler::RecordScope> profile_scope;
  if (profiler::active()) profile_scope.emplace("Optimizer.zero_grad#" + name_ + ".zero_grad", profiler::Kind::Optimizer);
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
  groups.emplace_back(std::move(params), lr);
  return groups;
}

}  // namespace minidl::optim
