// optim::SGD: option checks and the per-parameter call to Backend::sgd_step.
#include "optim/sgd.h"

#include <cmath>

#include "core/autograd.h"
#include "core/backend.h"

namespace minidl::optim {

namespace {
void check_options(const SGDOptions& o) {
  MINIDL_CHECK(std::isfinite(o.lr) && o.lr >= 0, "SGD: invalid learning rate ", o.lr, " (expected a finite lr >= 0)");
  MINIDL_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum, " (expected >= 0)");
  MINIDL_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay, " (expected >= 0)");
  MINIDL_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
               "SGD: nesterov momentum requires momentum > 0 and dampening == 0, got momentum ", o.momentum,
               " and dampening ", o.dampening);
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions o) : SGD(single_group(std::move(params), o.lr), o) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o) : Optimizer(std::move(groups), "SGD"), options_(o) {
  check_options(o);
}

const SGDParamState* SGD::find_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

SGDParamState& SGD::state(const Tensor& param) { return state_[param.impl()]; }

std::map<std::string, double> SGD::hyperparameters() const {
  return {{"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

Optimizer::ParamState SGD::export_param_state(const Tensor& param) const {
  ParamState out;
  if (const SGDParamState* s = find_state(param); s != nullptr && s->momentum_buffer.defined())
    out.tensors.emplace("momentum_buffer", s->momentum_buffer);
  return out;
}

std::string SGD::check_param_state(const ParamState& s) const {
  if (!s.tensors.empty() && options_.momentum == 0) return "a momentum buffer, but this SGD has momentum 0";
  return "";
}

void SGD::replace_state(std::vector<std::pair<Tensor, ParamState>> states) {
  state_.clear();
  for (auto& [param, s] : states) {
    auto it = s.tensors.find("momentum_buffer");
    if (it != s.tensors.end()) state_[param.impl()].momentum_buffer = it->second;
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    for (Tensor& param : group.params) {
      const Tensor grad = gradient_for_update(param);
      if (!grad.defined()) continue;
      SGDConfig cfg;
      cfg.lr = group.lr;
      cfg.momentum = options_.momentum;
      cfg.dampening = options_.dampening;
      cfg.weight_decay = options_.weight_decay;
      cfg.nesterov = options_.nesterov;
      Tensor no_buffer;
      Tensor* buffer = &no_buffer;
      if (options_.momentum != 0) {
        SGDParamState& s = state(param);
        cfg.first_step = !s.momentum_buffer.defined();
        if (cfg.first_step) {
          s.momentum_buffer = zeros_like(param);
        } else if (s.momentum_buffer.device() != param.device()) {
          s.momentum_buffer = s.momentum_buffer.to(param.device());  // the model moved since the last step
        }
        buffer = &s.momentum_buffer;
      }
      backend_for(param.device()).sgd_step(param, grad, *buffer, cfg);
    }
  }
}

}  // namespace minidl::optim
