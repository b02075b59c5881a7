// optim::SGD with momentum, dampening, weight decay and Nesterov momentum, PyTorch's rules:
//   g = grad + wd·p
//   buf = g on the first step, else momentum·buf + (1 - dampening)·g   (when momentum != 0)
//   g = nesterov ? g + momentum·buf : buf
//   p -= lr·g
// one fused backend kernel per parameter (Backend::sgd_step). Each parameter group may set its
// own lr, momentum, dampening, weight_decay and nesterov (GroupOptions); the rest come from SGDOptions.
#pragma once

#include <map>

#include "optim/optimizer.h"

namespace minidl::optim {

struct SGDOptions {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// Per-parameter state; momentum_buffer stays undefined until the first step with momentum.
struct SGDParamState {
  Tensor momentum_buffer;
};

class SGD : public Optimizer {
 public:
  // One group with the options `o`.
  SGD(std::vector<Tensor> params, SGDOptions o = {});
  // Each group's options: those it sets, the rest from `o`, e.g.
  //   SGD({{backbone, 0.01}, {head, {.lr = 0.1, .momentum = 0.5}}}, {.lr = 0.05, .momentum = 0.9})
  SGD(std::vector<ParamGroup> groups, SGDOptions o);

  void step() override;
  // The optimizer's options: the defaults of its groups.
  const SGDOptions& options() const { return options_; }
  // The options step() uses for the parameters of `group`.
  SGDOptions group_options(const ParamGroup& group) const;

  // State of `param` (for checkpoints): null before its first update.
  const SGDParamState* find_state(const Tensor& param) const;
  // Creates the (empty) state when missing, so a checkpoint loader can fill it in.
  SGDParamState& state(const Tensor& param);

 protected:
  // Checkpoint entries: "momentum_buffer" (absent until the first step with momentum);
  // hyperparameters (of the optimizer and of each group) momentum, dampening, weight_decay,
  // nesterov (0 or 1).
  std::vector<std::string> state_tensor_names() const override { return {"momentum_buffer"}; }
  std::vector<std::string> state_counter_names() const override { return {}; }
  std::map<std::string, double> hyperparameters() const override;
  std::map<std::string, double> group_hyperparameters(const ParamGroup& group) const override;
  ParamState export_param_state(const Tensor& param) const override;
  std::string check_param_state(const ParamState& s, const ParamGroup& group) const override;
  void replace_state(std::vector<std::pair<Tensor, ParamState>> states) override;

 private:
  SGDOptions options_;
  std::map<const TensorImpl*, SGDParamState> state_;  // keyed by parameter identity
};

}  // namespace minidl::optim
