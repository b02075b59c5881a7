// optim::SGD: option checks (of the optimizer and of each group) and the per-parameter call to
// Backend::sgd_step with the options of the parameter's group.
#include "optim/sgd.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::optim {

namespace {
// `where` is "" for the optimizer's own options, " in param group <g>" for a group's.
void check_options(const SGDOptions& o, const std::string& where) {
  MINIDL_CHECK(std::isfinite(o.lr) && o.lr >= 0, "SGD: invalid learning rate ", o.lr, where,
               " (expected a finite lr >= 0)");
  MINIDL_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum, where, " (expected >= 0)");
  MINIDL_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay, where, " (expected >= 0)");
  MINIDL_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
               "SGD: nesterov momentum requires momentum > 0 and dampening == 0, got momentum ", o.momentum,
               " and dampening ", o.dampening, where);
}

// The optimizer's options, checked, as the defaults of its groups.
GroupOptions checked_defaults(const SGDOptions& o) {
  check_options(o, "");
  return GroupOptions{.lr = o.lr, .weight_decay = o.weight_decay, .momentum = o.momentum, .dampening = o.dampening,
                      .nesterov = o.nesterov};
}

std::map<std::string, double> hyperparameters_of(const SGDOptions& o) {
  return {{"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(single_group(std::move(params), o.lr), o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o)
    : Optimizer(std::move(groups), "SGD", checked_defaults(o)), options_(o) {
  for (size_t g = 0; g < param_groups().size(); ++g)
    check_options(group_options(param_groups()[g]), detail::make_message(" in param group ", g));
}

// value_or: an option unset after construction (cleared by hand) falls back to the optimizer's.
SGDOptions SGD::group_options(const ParamGroup& group) const {
  const GroupOptions& o = group.options;
  return SGDOptions{.lr = group.lr,
                    .momentum = o.momentum.value_or(options_.momentum),
                    .dampening = o.dampening.value_or(options_.dampening),
                    .weight_decay = o.weight_decay.value_or(options_.weight_decay),
                    .nesterov = o.nesterov.value_or(options_.nesterov)};
}

const SGDParamState* SGD::find_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

SGDParamState& SGD::state(const Tensor& param) { return state_[param.impl()]; }

std::map<std::string, double> SGD::hyperparameters() const { return hyperparameters_of(options_); }

std::map<std::string, double> SGD::group_hyperparameters(const ParamGroup& group) const {
  return hyperparameters_of(group_options(group));
}

Optimizer::ParamState SGD::export_param_state(const Tensor& param) const {
  ParamState out;
  if (const SGDParamState* s = find_state(param); s != nullptr && s->momentum_buffer.defined())
    out.tensors.emplace("momentum_buffer", s->momentum_buffer);
  return out;
}

std::string SGD::check_param_state(const ParamState& s, const ParamGroup& group) const {
  if (!s.tensors.empty() && group_options(group).momentum == 0)
    return "a momentum buffer, but its group has momentum 0";
  return "";
}

void SGD::replace_state(std::vector<std::pair<Tensor, ParamState>> states) {
  state_.clear();
  for (auto& [param, s] : states) {
    auto it = s.tensors.find("momentum_buffer");
    if (it != s.tensors.end()) state_[param.impl()].momentum_buffer = it->second;
  }
}

// Note [one update per list]: step() gathers each group's parameters into lists that share a
// device, a dtype and an update rule (for SGD: whether their momentum buffers are new; for Adam:
// the step count), and hands each list to the backend at once (sgd_step_many): on a GPU one
// launch per list instead of one per parameter — for a model trained as a whole, one launch per
// group and device. Within a list the parameters keep the group's order; the arithmetic is that
// of the single update, so the results do not change.
void SGD::step() {
  std::optional<profiler::RecordScope> profile_scope;
  if (profiler::active()) profile_scope.emplace("Optimizer.step#" + optimizer_name() + ".step", profiler::Kind::Optimizer);
  NoGradGuard no_grad;
  struct List {
    Device device;
    DType dtype;
    bool first_step;
    std::vector<Tensor> params, grads, buffers;
  };
  for (auto& group : param_groups()) {
    const SGDOptions o = group_options(group);
    std::vector<List> lists;
    for (Tensor& param : group.params) {
      const Tensor grad = gradient_for_update(param);
      if (!grad.defined()) continue;
      bool first_step = true;
      Tensor buffer;  // undefined without momentum
      if (o.momentum != 0) {
        SGDParamState& s = state(param);
        first_step = !s.momentum_buffer.defined();
        if (first_step) {
          s.momentum_buffer = zeros_like(param);
        } else if (s.momentum_buffer.device() != param.device()) {
          s.momentum_buffer = s.momentum_buffer.to(param.device());  // the model moved since the last step
        }
        buffer = s.momentum_buffer;
      }
      auto it = std::find_if(lists.begin(), lists.end(), [&](const List& l) {
        return l.device == param.device() && l.dtype == param.dtype() && l.first_step == first_step;
      });
      if (it == lists.end()) it = lists.insert(lists.end(), List{param.device(), param.dtype(), first_step, {}, {}, {}});
      it->params.push_back(param);
      it->grads.push_back(grad);
      it->buffers.push_back(buffer);
    }
    for (List& l : lists) {
      SGDConfig cfg;
      cfg.lr = o.lr;
      cfg.momentum = o.momentum;
      cfg.dampening = o.dampening;
      cfg.weight_decay = o.weight_decay;
      cfg.nesterov = o.nesterov;
      cfg.first_step = l.first_step;
      backend_for(l.device).sgd_step_many(l.params, l.grads, l.buffers, cfg);
    }
  }
}

}  // namespace minidl::optim
