// optim::Optimizer: the base of SGD and Adam/AdamW. It holds parameter groups (each with its
// own learning rate, which LR schedulers rewrite) and checks them once at construction: leaf,
// floating-point, defined, none listed twice. step() in each subclass skips parameters whose
// grad is undefined and calls one fused update kernel per parameter through the backend.
// state_dict()/load_state_dict() export and import the per-parameter state (momentum buffers,
// Adam moments and step counts) keyed by the parameters' names, so a checkpoint maps cleanly
// onto Module::state_dict() names (optim/optimizer_state.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace minidl::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr;
};

// Parameters under their names, as Module::named_parameters() lists them.
using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

// An optimizer's state in checkpoint form. Per-parameter entries are keyed
// "<parameter name>.<entry>", e.g. "0.weight.momentum_buffer", "2.bias.exp_avg", "2.bias.step";
// a parameter that has not been updated yet has no entries.
struct OptimizerState {
  std::string optimizer;                          // the class that wrote it: "SGD", "Adam", "AdamW"
  std::map<std::string, Tensor> tensors;          // state buffers (detached; share the optimizer's storage)
  std::map<std::string, int64_t> counters;        // per-parameter counters (Adam's step)
  std::map<std::string, double> hyperparameters;  // the options besides lr: momentum, betas, ...
  std::vector<double> group_lrs;                  // each group's current lr (schedulers rewrite it)
};

class Optimizer {
 public:
  virtual ~Optimizer();
  virtual void step() = 0;
  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

  // Every parameter's state under its name in `names` (usually model.named_parameters()).
  // Throws when a parameter of this optimizer has no name there.
  OptimizerState state_dict(const NamedParameters& names) const;
  // Replaces the whole state with `state` (copies, moved to each parameter's device) and sets
  // the groups' lrs. All or nothing: one error lists every problem (another optimizer's state,
  // different hyperparameters or group count, unknown parameter names or entries, shapes or
  // dtypes that differ from the parameter's, incomplete entries) and nothing changes.
  void load_state_dict(const OptimizerState& state, const NamedParameters& names);

 protected:
  // One parameter's state, entries by short name ("momentum_buffer", "exp_avg", "step").
  struct ParamState {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, int64_t> counters;
  };
  // The subclass's side of state_dict()/load_state_dict():
  // the tensor and counter entries a parameter's state may hold,
  virtual std::vector<std::string> state_tensor_names() const = 0;
  virtual std::vector<std::string> state_counter_names() const = 0;
  // the options a loaded state must agree with,
  virtual std::map<std::string, double> hyperparameters() const = 0;
  // the state of `param` (empty before its first update),
  virtual ParamState export_param_state(const Tensor& param) const = 0;
  // "" when `s` is a usable state for a parameter, else what is wrong with it (names, shapes
  // and dtypes are already checked),
  virtual std::string check_param_state(const ParamState& s) const = 0;
  // and the swap itself: all state dropped, then each listed parameter gets its state (checked,
  // tensors already private copies on the parameter's device). Must not throw.
  virtual void replace_state(std::vector<std::pair<Tensor, ParamState>> states) = 0;

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
