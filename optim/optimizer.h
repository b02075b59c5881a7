// optim::Optimizer: the base of SGD and Adam/AdamW. It holds parameter groups, each with its own
// values of the optimizer's options (PyTorch's param_groups: lr, weight decay, betas, momentum,
// ...; LR schedulers rewrite each group's lr), and checks them once at construction: leaf,
// floating-point, defined, none listed twice, options in range. step() in each subclass skips
// parameters whose grad is undefined and calls one fused update kernel per parameter through the
// backend, with the options of that parameter's group.
// state_dict()/load_state_dict() export and import the per-parameter state (momentum buffers,
// Adam moments and step counts) keyed by the parameters' names, so a checkpoint maps cleanly
// onto Module::state_dict() names, and each group's parameters and options (optim/optimizer_state.cpp).
//
// The usual GPT recipe: weight decay on the 2-D weights only.
//   std::vector<Tensor> decay, no_decay;
//   for (const Tensor& p : model.parameters()) (p.shape().rank() >= 2 ? decay : no_decay).push_back(p);
//   optim::AdamW opt({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
//                    optim::AdamWOptions{.lr = 1e-3, .beta2 = 0.99});
// Both groups take lr 1e-3, betas (0.9, 0.99) and eps 1e-8 from the AdamWOptions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace minidl::optim {

// A group's own values of its optimizer's options (PyTorch's per-group keys). An option a group
// leaves unset takes the optimizer's value when the optimizer is made (PyTorch's rule); setting an
// option the optimizer does not have (momentum for Adam, betas for SGD) is an error. Designated
// initializers must keep this order: lr, weight_decay, beta1, beta2, eps, momentum, dampening, nesterov.
// (The `{}` initializers let `{.weight_decay = 0.1}` leave the others out without a
// -Wmissing-field-initializers warning.)
struct GroupOptions {
  std::optional<double> lr{}, weight_decay{};     // every optimizer
  std::optional<double> beta1{}, beta2{}, eps{};  // Adam, AdamW
  std::optional<double> momentum{}, dampening{};  // SGD
  std::optional<bool> nesterov{};                 // SGD
};

// Parameters that share their options:
//   {params, 0.1}                      lr 0.1, every other option the optimizer's
//   {params, {.weight_decay = 0.0}}    weight decay 0, every other option (lr too) the optimizer's
//   {params}                           every option the optimizer's
// (A list made only of groups like `{{w}}`, braced tensors and no options, also reads as a list of
// tensors; name the type there: std::vector<ParamGroup>{{{w}}, {{b}}}.)
// The optimizer's constructor completes each group: from then on `lr` is the learning rate step()
// uses (LR schedulers rewrite it), and `options` holds every option of that optimizer. Both may be
// changed between steps; options.lr is not read again (it stays the group's initial lr).
struct ParamGroup {
  // A template so that only a number picks this form: `{params, {}}` means "no options set", never lr 0.
  template <typename Number>
    requires std::is_arithmetic_v<Number>
  ParamGroup(std::vector<Tensor> group_params, Number group_lr)
      : params(std::move(group_params)),
        lr(static_cast<double>(group_lr)),
        options{.lr = static_cast<double>(group_lr)} {}
  ParamGroup(std::vector<Tensor> group_params, GroupOptions group_options = {})
      : params(std::move(group_params)), lr(group_options.lr.value_or(0.0)), options(group_options) {}

  std::vector<Tensor> params;
  double lr;  // set from options.lr (else the optimizer's lr) by the optimizer's constructor
  GroupOptions options;
};

// Parameters under their names, as Module::named_parameters() lists them.
using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

// One parameter group in checkpoint form.
struct ParamGroupState {
  std::vector<std::string> params;        // its parameters' names
  std::map<std::string, double> options;  // its options besides lr, named as in `hyperparameters`
};

// An optimizer's state in checkpoint form. Per-parameter entries are keyed
// "<parameter name>.<entry>", e.g. "0.weight.momentum_buffer", "2.bias.exp_avg", "2.bias.step";
// a parameter that has not been updated yet has no entries.
struct OptimizerState {
  std::string optimizer;                          // the class that wrote it: "SGD", "Adam", "AdamW"
  std::map<std::string, Tensor> tensors;          // state buffers (detached; share the optimizer's storage)
  std::map<std::string, int64_t> counters;        // per-parameter counters (Adam's step)
  std::map<std::string, double> hyperparameters;  // the optimizer's options besides lr (the groups' defaults)
  std::vector<double> group_lrs;                  // each group's current lr (schedulers rewrite it)
  // Each group's parameters and options, in group order. Empty in a state written before groups
  // had options of their own: there every group used `hyperparameters`.
  std::vector<ParamGroupState> param_groups;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  virtual void step() = 0;
  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

  // Every parameter's state under its name in `names` (usually model.named_parameters()), and
  // each group's parameter names and options. Throws when a parameter of this optimizer has no
  // name there.
  OptimizerState state_dict(const NamedParameters& names) const;
  // Replaces the whole state with `state` (copies, moved to each parameter's device) and sets
  // the groups' lrs. The other options are not loaded but compared: the optimizer must be made
  // with the options the state was written with (its defaults and each group's), and with the same
  // groups (the same parameter names in each). All or nothing: one error lists every problem
  // (another optimizer's state, other options, group count or group members, unknown parameter
  // names or entries, shapes or dtypes that differ from the parameter's, incomplete entries) and
  // nothing changes.
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
  // the options besides lr, of the optimizer (the groups' defaults) and of one group, under the
  // same names (a loaded state must agree with both),
  virtual std::map<std::string, double> hyperparameters() const = 0;
  virtual std::map<std::string, double> group_hyperparameters(const ParamGroup& group) const = 0;
  // the state of `param` (empty before its first update),
  virtual ParamState export_param_state(const Tensor& param) const = 0;
  // "" when `s` is a usable state for a parameter of `group`, else what is wrong with it (names,
  // shapes and dtypes are already checked),
  virtual std::string check_param_state(const ParamState& s, const ParamGroup& group) const = 0;
  // and the swap itself: all state dropped, then each listed parameter gets its state (checked,
  // tensors already private copies on the parameter's device). Must not throw.
  virtual void replace_state(std::vector<std::pair<Tensor, ParamState>> states) = 0;

  // `optimizer` names the subclass in error messages; `defaults` holds the optimizer's value of
  // every option it has (and no other): each group's unset options are filled in from it, and a
  // group that sets any other option is refused. The subclass checks the completed groups' ranges.
  Optimizer(std::vector<ParamGroup> groups, std::string optimizer, const GroupOptions& defaults);
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
