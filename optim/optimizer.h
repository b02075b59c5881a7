// optim::Optimizer: the base of SGD and Adam/AdamW. It holds parameter groups (each with its
// own learning rate, which LR schedulers rewrite) and checks them once at construction: leaf,
// floating-point, defined, none listed twice. step() in each subclass skips parameters whose
// grad is undefined and calls one fused update kernel per parameter through the backend.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  virtual void step() = 0;
  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

 protected:
  // `optimizer` names the subclass in error messages.
  Optimizer(std::vector<ParamGroup> groups, std::string optimizer);
  const std::string& optimizer_name() const { return name_; }
  // The contiguous gradient of `param` for an update kernel, or undefined when it has none;
  // throws when it does not match the parameter (shape, dtype, device).
  Tensor gradient_for_update(const Tensor& param) const;

 private:
  std::vector<ParamGroup> groups_;
  std::string name_;
};

// Wraps a flat parameter list into one group with learning rate `lr`.
std::vector<ParamGroup> single_group(std::vector<Tensor> params, double lr);

}  // namespace minidl::optim
