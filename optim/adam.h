// optim::Adam and optim::AdamW (Kingma & Ba; Loshchilov & Hutter), PyTorch's rules:
//   AdamW first decays p *= 1 - lr·wd; Adam instead adds wd·p to the gradient g
//   m = β1·m + (1 - β1)·g,   v = β2·v + (1 - β2)·g²
//   p -= lr · (m / (1 - β1ᵗ)) / (sqrt(v / (1 - β2ᵗ)) + eps)
// with t the parameter's own 1-based step count; one fused kernel (Backend::adam_step). Each
// parameter group may set its own lr, betas, eps and weight_decay (GroupOptions, e.g. weight decay
// on the 2-D weights only: optim/optimizer.h); the rest come from the optimizer's options.
#pragma once

#include <map>

#include "optim/optimizer.h"

namespace minidl::optim {

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};
// Same fields as AdamOptions; only the weight_decay default differs (PyTorch's AdamW: 1e-2).
struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

// Per-parameter state; step = 0 and undefined moments until the first update.
struct AdamParamState {
  int64_t step = 0;
  Tensor exp_avg, exp_avg_sq;
};

class Adam : public Optimizer {
 public:
  // One group with the options `o`.
  Adam(std::vector<Tensor> params, AdamOptions o = {});
  // Each group's options: those it sets, the rest from `o`.
  Adam(std::vector<ParamGroup> groups, AdamOptions o);

  void step() override;
  // The optimizer's options: the defaults of its groups.
  const AdamOptions& options() const { return options_; }
  // The options step() uses for the parameters of `group` (AdamW's too).
  AdamOptions group_options(const ParamGroup& group) const;

  // State of `param` (for checkpoints): null before its first update.
  const AdamParamState* find_state(const Tensor& param) const;
  // Creates the (empty) state when missing, so a checkpoint loader can fill it in.
  AdamParamState& state(const Tensor& param);

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled_weight_decay, const char* optimizer);

  // Checkpoint entries: "exp_avg", "exp_avg_sq" and the counter "step", all three or none;
  // hyperparameters (of the optimizer and of each group) beta1, beta2, eps, weight_decay.
  std::vector<std::string> state_tensor_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> state_counter_names() const override { return {"step"}; }
  std::map<std::string, double> hyperparameters() const override;
  std::map<std::string, double> group_hyperparameters(const ParamGroup& group) const override;
  ParamState export_param_state(const Tensor& param) const override;
  std::string check_param_state(const ParamState& s, const ParamGroup& group) const override;
  void replace_state(std::vector<std::pair<Tensor, ParamState>> states) override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
  std::map<const TensorImpl*, AdamParamState> state_;  // keyed by parameter identity
};

class AdamW : public Adam {
 public:
  // One group with the options `o`.
  AdamW(std::vector<Tensor> params, AdamWOptions o = {});
  // Each group's options: those it sets, the rest from `o`, e.g.
  //   AdamW({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}}, {.lr = 1e-3, .beta2 = 0.99})
  AdamW(std::vector<ParamGroup> groups, AdamWOptions o);
};

}  // namespace minidl::optim
