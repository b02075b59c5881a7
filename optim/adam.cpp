// optim::Adam / AdamW: option checks, per-parameter state and the call to Backend::adam_step.
#include "optim/adam.h"

#include <cmath>

#include "core/autograd.h"
#include "core/backend.h"

namespace minidl::optim {

namespace {
void check_options(const AdamOptions& o, const char* optimizer) {
  MINIDL_CHECK(std::isfinite(o.lr) && o.lr >= 0, optimizer, ": invalid learning rate ", o.lr,
               " (expected a finite lr >= 0)");
  MINIDL_CHECK(o.beta1 >= 0 && o.beta1 < 1, optimizer, ": invalid beta1 ", o.beta1, " (expected 0 <= beta1 < 1)");
  MINIDL_CHECK(o.beta2 >= 0 && o.beta2 < 1, optimizer, ": invalid beta2 ", o.beta2, " (expected 0 <= beta2 < 1)");
  MINIDL_CHECK(o.eps >= 0, optimizer, ": invalid eps ", o.eps, " (expected >= 0)");
  MINIDL_CHECK(o.weight_decay >= 0, optimizer, ": invalid weight_decay ", o.weight_decay, " (expected >= 0)");
}

AdamOptions as_adam_options(const AdamWOptions& o) { return AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}; }
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(single_group(std::move(params), o.lr), o) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled_weight_decay, const char* optimizer)
    : Optimizer(std::move(groups), optimizer), options_(o), decoupled_weight_decay_(decoupled_weight_decay) {
  check_options(o, optimizer);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o) : AdamW(single_group(std::move(params), o.lr), o) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam(std::move(groups), as_adam_options(o), true, "AdamW") {}

const AdamParamState* Adam::find_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

AdamParamState& Adam::state(const Tensor& param) { return state_[param.impl()]; }

std::map<std::string, double> Adam::hyperparameters() const {
  return {{"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

Optimizer::ParamState Adam::export_param_state(const Tensor& param) const {
  ParamState out;
  const AdamParamState* s = find_state(param);
  if (s == nullptr || s->step == 0) return out;  // not updated yet: nothing to save
  out.tensors.emplace("exp_avg", s->exp_avg);
  out.tensors.emplace("exp_avg_sq", s->exp_avg_sq);
  out.counters.emplace("step", s->step);
  return out;
}

std::string Adam::check_param_state(const ParamState& s) const {
  const bool complete = s.tensors.count("exp_avg") && s.tensors.count("exp_avg_sq") && s.counters.count("step");
  if (!complete) return "needs exp_avg, exp_avg_sq and step together";
  if (s.counters.at("step") == 0) return "step is 0, but moments are given (a state starts at step 1)";
  return "";
}

void Adam::replace_state(std::vector<std::pair<Tensor, ParamState>> states) {
  state_.clear();
  for (auto& [param, s] : states) {
    AdamParamState& dst = state_[param.impl()];
    dst.exp_avg = s.tensors.at("exp_avg");
    dst.exp_avg_sq = s.tensors.at("exp_avg_sq");
    dst.step = s.counters.at("step");
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    for (Tensor& param : group.params) {
      const Tensor grad = gradient_for_update(param);
      if (!grad.defined()) continue;
      AdamParamState& s = state(param);
      if (!s.exp_avg.defined()) s.exp_avg = zeros_like(param);
      if (!s.exp_avg_sq.defined()) s.exp_avg_sq = zeros_like(param);
      if (s.exp_avg.device() != param.device()) s.exp_avg = s.exp_avg.to(param.device());  // the model moved
      if (s.exp_avg_sq.device() != param.device()) s.exp_avg_sq = s.exp_avg_sq.to(param.device());
      s.step += 1;
      AdamConfig cfg;
      cfg.lr = group.lr;
      cfg.beta1 = options_.beta1;
      cfg.beta2 = options_.beta2;
      cfg.eps = options_.eps;
      cfg.weight_decay = options_.weight_decay;
      cfg.decoupled_weight_decay = decoupled_weight_decay_;
      cfg.step = s.step;
      backend_for(param.device()).adam_step(param, grad, s.exp_avg, s.exp_avg_sq, cfg);
    }
  }
}

}  // namespace minidl::optim
