// optim::SGD with momentum, dampening, weight decay and Nesterov momentum, PyTorch's rules:
//   g = grad + wd·p
//   buf = g on the first step, else momentum·buf + (1 - dampening)·g   (when momentum != 0)
//   g = nesterov ? g + momentum·buf : buf
//   p -= lr·g
// one fused backend kernel per parameter (Backend::sgd_step).
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
  // One group with lr = o.lr.
  SGD(std::vector<Tensor> params, SGDOptions o = {});
  // Each group brings its own lr; the other options apply to all groups.
  SGD(std::vector<ParamGroup> groups, SGDOptions o);

  void step() override;
  const SGDOptions& options() const { return options_; }

  // State of `param` (for checkpoints): null before its first update.
  const SGDParamState* find_state(const Tensor& param) const;
  // Creates the (empty) state when missing, so a checkpoint loader can fill it in.
  SGDParamState& state(const Tensor& param);

 protected:
  // Checkpoint entries: "momentum_buffer" (absent until the first step with momentum);
  // hyperparameters momentum, dampening, weight_decay, nesterov (0 or 1).
  std::vector<std::string> state_tensor_names() const override { return {"momentum_buffer"}; }
  std::vector<std::string> state_counter_names() const override { return {}; }
  std::map<std::string, double> hyperparameters() const override;
  ParamState export_param_state(const Tensor& param) const override;
  std::string check_param_state(const ParamState& s) const override;
  void replace_state(std::vector<std::pair<Tensor, ParamState>> states) override;

 private:
  SGDOptions options_;
  std::map<const TensorImpl*, SGDParamState> state_;  // keyed by parameter identity
};

}  // namespace minidl::optim
