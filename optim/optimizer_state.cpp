// Optimizer::state_dict / load_state_dict: the per-parameter state of any optimizer, keyed by
// parameter name, and its all-or-nothing import. The subclasses say which entries a state has
// (optim/sgd.cpp, optim/adam.cpp); the naming, the checks and the copies live here once.
#include <cmath>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "optim/optimizer.h"

namespace minidl::optim {

namespace {

// optimizer parameter -> its name; throws naming the first parameter that has none.
std::unordered_map<const TensorImpl*, std::string> names_of(const std::vector<ParamGroup>& groups,
                                                            const NamedParameters& names, const std::string& who,
                                                            const char* what) {
  std::unordered_map<const TensorImpl*, std::string> by_impl;
  for (const auto& [name, t] : names)
    if (t.defined()) by_impl.emplace(t.impl(), name);
  std::unordered_map<const TensorImpl*, std::string> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = groups[g].params[i];
      auto it = by_impl.find(p.impl());
      MINIDL_CHECK(it != by_impl.end(), who, ": ", what, ": param ", i, " of group ", g, " (shape ", p.shape(),
                   ") is not among the ", names.size(), " named parameters given");
      out.emplace(p.impl(), it->second);
    }
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x == s) return true;
  return false;
}

// "0.weight.exp_avg" -> {"0.weight", "exp_avg"}: entry names have no '.', parameter names may.
std::pair<std::string, std::string> split_key(const std::string& key) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

}  // namespace

OptimizerState Optimizer::state_dict(const NamedParameters& names) const {
  const auto name_of = names_of(groups_, names, name_, "state_dict");
  OptimizerState out;
  out.optimizer = name_;
  out.hyperparameters = hyperparameters();
  for (const auto& group : groups_) {
    out.group_lrs.push_back(group.lr);
    for (const Tensor& p : group.params) {
      const std::string& pname = name_of.at(p.impl());
      ParamState s = export_param_state(p);
      for (auto& [entry, t] : s.tensors)
        if (t.defined()) out.tensors.emplace(pname + "." + entry, t.detach());
      for (auto& [entry, c] : s.counters) out.counters.emplace(pname + "." + entry, c);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& state, const NamedParameters& names) {
  const auto name_of = names_of(groups_, names, name_, "load_state_dict");
  std::map<std::string, Tensor> param_by_name;
  for (const auto& group : groups_)
    for (const Tensor& p : group.params) param_by_name.emplace(name_of.at(p.impl()), p);

  std::vector<std::string> problems;
  if (state.optimizer != name_) problems.push_back("the state was written by " + state.optimizer);

  const std::map<std::string, double> own = hyperparameters();
  for (const auto& [key, value] : own) {
    auto it = state.hyperparameters.find(key);
    std::ostringstream os;
    if (it == state.hyperparameters.end()) os << "hyperparameter " << key << " is missing";
    else if (it->second != value) os << key << " is " << it->second << " in the state, " << value << " here";
    if (!os.str().empty()) problems.push_back(os.str());
  }
  for (const auto& [key, value] : state.hyperparameters)
    if (!own.count(key)) problems.push_back("unknown hyperparameter " + key);

  if (state.group_lrs.size() != groups_.size()) {
    problems.push_back(detail::make_message("the state has ", state.group_lrs.size(), " param group(s), this ",
                                            name_, " has ", groups_.size()));
  }
  for (size_t g = 0; g < state.group_lrs.size(); ++g) {
    const double lr = state.group_lrs[g];
    if (!(std::isfinite(lr) && lr >= 0)) problems.push_back(detail::make_message("group ", g, " has lr ", lr));
  }

  // Gather each parameter's entries, checking names, shapes and dtypes on the way.
  const std::vector<std::string> tensor_names = state_tensor_names(), counter_names = state_counter_names();
  std::map<std::string, ParamState> by_param;
  for (const auto& [key, t] : state.tensors) {
    const auto [pname, entry] = split_key(key);
    auto p = param_by_name.find(pname);
    if (p == param_by_name.end()) {
      problems.push_back("unknown parameter in " + key);
    } else if (!contains(tensor_names, entry)) {
      problems.push_back("unknown entry " + key);
    } else if (!t.defined()) {
      problems.push_back(key + " is an undefined tensor");
    } else if (t.shape() != p->second.shape() || t.dtype() != p->second.dtype()) {
      problems.push_back(detail::make_message(key, ": expected ", p->second.shape(), " ", p->second.dtype(),
                                              " like its parameter, got ", t.shape(), " ", t.dtype()));
    } else {
      by_param[pname].tensors.emplace(entry, t);
    }
  }
  for (const auto& [key, c] : state.counters) {
    const auto [pname, entry] = split_key(key);
    if (!param_by_name.count(pname)) problems.push_back("unknown parameter in " + key);
    else if (!contains(counter_names, entry)) problems.push_back("unknown entry " + key);
    else if (c < 0) problems.push_back(detail::make_message(key, " is negative (", c, ")"));
    else by_param[pname].counters.emplace(entry, c);
  }
  for (const auto& [pname, s] : by_param) {
    const std::string why = check_param_state(s);
    if (!why.empty()) problems.push_back(pname + ": " + why);
  }

  if (!problems.empty()) {
    std::ostringstream os;
    os << name_ << ": load_state_dict failed (nothing was loaded): ";
    for (size_t i = 0; i < problems.size(); ++i) os << (i ? "; " : "") << problems[i];
    throw Error(os.str());
  }

  // Private copies on each parameter's device first (these may throw), then the swap.
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, ParamState>> states;
  for (auto& [pname, s] : by_param) {
    const Tensor& p = param_by_name.at(pname);
    for (auto& [entry, t] : s.tensors) {
      Tensor copy = empty(p.shape(), p.options());
      copy.copy_(t);
      t = copy;
    }
    states.emplace_back(p, std::move(s));
  }
  replace_state(std::move(states));
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].lr = state.group_lrs[g];
}

}  // namespace minidl::optim
