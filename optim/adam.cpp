// optim::Adam / AdamW: option checks (of the optimizer and of each group), per-parameter state and
// the call to Backend::adam_step with the options of the parameter's group.
#include "optim/adam.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::optim {

namespace {
// `where` is "" for the optimizer's own options, " in param group <g>" for a group's.
void check_options(const AdamOptions& o, const char* optimizer, const std::string& where) {
  MINIDL_CHECK(std::isfinite(o.lr) && o.lr >= 0, optimizer, ": invalid learning rate ", o.lr, where,
               " (expected a finite lr >= 0)");
  MINIDL_CHECK(o.beta1 >= 0 && o.beta1 < 1, optimizer, ": invalid beta1 ", o.beta1, where,
               " (expected 0 <= beta1 < 1)");
  MINIDL_CHECK(o.beta2 >= 0 && o.beta2 < 1, optimizer, ": invalid beta2 ", o.beta2, where,
               " (expected 0 <= beta2 < 1)");
  MINIDL_CHECK(o.eps >= 0, optimizer, ": invalid eps ", o.eps, where, " (expected >= 0)");
  MINIDL_CHECK(o.weight_decay >= 0, optimizer, ": invalid weight_decay ", o.weight_decay, where, " (expected >= 0)");
}

// The optimizer's options, checked, as the defaults of its groups.
GroupOptions checked_defaults(const AdamOptions& o, const char* optimizer) {
  check_options(o, optimizer, "");
  return GroupOptions{.lr = o.lr, .weight_decay = o.weight_decay, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps};
}

std::map<std::string, double> hyperparameters_of(const AdamOptions& o) {
  return {{"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay}};
}

AdamOptions as_adam_options(const AdamWOptions& o) { return AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}; }
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions o) : Adam(single_group(std::move(params), o.lr), o) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, bool decoupled_weight_decay, const char* optimizer)
    : Optimizer(std::move(groups), optimizer, checked_defaults(o, optimizer)),
      options_(o),
      decoupled_weight_decay_(decoupled_weight_decay) {
  for (size_t g = 0; g < param_groups().size(); ++g)
    check_options(group_options(param_groups()[g]), optimizer, detail::make_message(" in param group ", g));
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o) : AdamW(single_group(std::move(params), o.lr), o) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam(std::move(groups), as_adam_options(o), true, "AdamW") {}

const AdamParamState* Adam::find_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

AdamParamState& Adam::state(const Tensor& param) { return state_[param.impl()]; }

// value_or: an option unset after construction (cleared by hand) falls back to the optimizer's.
AdamOptions Adam::group_options(const ParamGroup& group) const {
  const GroupOptions& o = group.options;
  return AdamOptions{.lr = group.lr,
                     .beta1 = o.beta1.value_or(options_.beta1),
                     .beta2 = o.beta2.value_or(options_.beta2),
                     .eps = o.eps.value_or(options_.eps),
                     .weight_decay = o.weight_decay.value_or(options_.weight_decay)};
}

std::map<std::string, double> Adam::hyperparameters() const { return hyperparameters_of(options_); }

std::map<std::string, double> Adam::group_hyperparameters(const ParamGroup& group) const {
  return hyperparameters_of(group_options(group));
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

std::string Adam::check_param_state(const ParamState& s, const ParamGroup& /*group*/) const {
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

// The parameters go to the backend in lists (Note [one update per list], optim/sgd.cpp), here
// of one device, dtype and step count (the bias corrections depend on it).
void Adam::step() {
  std::optional<profiler::RecordScope> profile_scope;
  if (profiler::active()) profile_scope.emplace("Optimizer.step#" + optimizer_name() + ".step", profiler::Kind::Optimizer);
  NoGradGuard no_grad;
  struct List {
    Device device;
    DType dtype;
    int64_t step;
    std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  };
  for (auto& group : param_groups()) {
    const AdamOptions o = group_options(group);
    std::vector<List> lists;
    for (Tensor& param : group.params) {
      const Tensor grad = gradient_for_update(param);
      if (!grad.defined()) continue;
      AdamParamState& s = state(param);
      if (!s.exp_avg.defined()) s.exp_avg = zeros_like(param);
      if (!s.exp_avg_sq.defined()) s.exp_avg_sq = zeros_like(param);
      if (s.exp_avg.device() != param.device()) s.exp_avg = s.exp_avg.to(param.device());  // the model moved
      if (s.exp_avg_sq.device() != param.device()) s.exp_avg_sq = s.exp_avg_sq.to(param.device());
      s.step += 1;
      auto it = std::find_if(lists.begin(), lists.end(), [&](const List& l) {
        return l.device == param.device() && l.dtype == param.dtype() && l.step == s.step;
      });
      if (it == lists.end()) it = lists.insert(lists.end(), List{param.device(), param.dtype(), s.step, {}, {}, {}, {}});
      it->params.push_back(param);
      it->grads.push_back(grad);
      it->exp_avgs.push_back(s.exp_avg);
      it->exp_avg_sqs.push_back(s.exp_avg_sq);
    }
    for (List& l : lists) {
      AdamConfig cfg;
      cfg.lr = o.lr;
      cfg.beta1 = o.beta1;
      cfg.beta2 = o.beta2;
      cfg.eps = o.eps;
      cfg.weight_decay = o.weight_decay;
      cfg.decoupled_weight_decay = decoupled_weight_decay_;
      cfg.step = l.step;
      backend_for(l.device).adam_step_many(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, cfg);
    }
  }
}

}  // namespace minidl::optim
