// Optimizer::state_dict / load_state_dict: the per-parameter state of any optimizer, keyed by
// parameter name, each group's members and options, and the all-or-nothing import. The subclasses
// say which entries a state has and which options they have (optim/sgd.cpp, optim/adam.cpp); the
// naming, the checks and the copies live here once.
#include <algorithm>
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

std::string join_names(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

bool same_members(std::vector<std::string> a, std::vector<std::string> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

// load_state_dict's checks of each group's members and options against this optimizer's (its
// options besides lr `own_defaults`, each group's `own_groups` and parameter names `own_members`;
// the state has as many group lrs as there are groups). A state without group states was written
// when every group used the optimizer's options: each of its groups has its `hyperparameters`.
// A difference where both sides' group just inherits its optimizer's value is left to the check
// of the optimizer's own options.
void check_group_states(const OptimizerState& state, const std::map<std::string, double>& own_defaults,
                        const std::vector<std::map<std::string, double>>& own_groups,
                        const std::vector<std::vector<std::string>>& own_members, std::vector<std::string>& problems) {
  const bool has_group_states = !state.param_groups.empty();
  if (has_group_states && state.param_groups.size() != own_groups.size()) {
    problems.push_back(detail::make_message("the state lists ", state.param_groups.size(), " param group(s) but ",
                                            state.group_lrs.size(), " group lr(s)"));
    return;
  }
  for (size_t g = 0; g < own_groups.size(); ++g) {
    if (has_group_states && !same_members(state.param_groups[g].params, own_members[g])) {
      problems.push_back(detail::make_message("param group ", g, " holds ", join_names(state.param_groups[g].params),
                                              " in the state, ", join_names(own_members[g]), " here"));
    }
    const std::map<std::string, double>& saved =
        has_group_states ? state.param_groups[g].options : state.hyperparameters;
    for (const auto& [key, value] : own_groups[g]) {
      auto it = saved.find(key);
      if (it == saved.end()) {
        if (has_group_states)
          problems.push_back(detail::make_message("param group ", g, ": option ", key, " is missing"));
        continue;  // (a key missing from `hyperparameters` is reported with them)
      }
      if (it->second == value) continue;
      auto own_default = own_defaults.find(key);
      auto saved_default = state.hyperparameters.find(key);
      const bool both_inherit = own_default != own_defaults.end() && own_default->second == value &&
                                saved_default != state.hyperparameters.end() && saved_default->second == it->second;
      if (both_inherit) continue;
      problems.push_back(detail::make_message("param group ", g, ": ", key, " is ", it->second, " in the state",
                                              has_group_states ? "" : " (which has one set of options for all groups)",
                                              ", ", value, " here"));
    }
    if (has_group_states) {
      for (const auto& [key, value] : state.param_groups[g].options)
        if (!own_groups[g].count(key))
          problems.push_back(detail::make_message("param group ", g, ": unknown option ", key));
    }
  }
}

}  // namespace

OptimizerState Optimizer::state_dict(const NamedParameters& names) const {
  const auto name_of = names_of(groups_, names, name_, "state_dict");
  OptimizerState out;
  out.optimizer = name_;
  out.hyperparameters = hyperparameters();
  for (const auto& group : groups_) {
    out.group_lrs.push_back(group.lr);
    ParamGroupState& group_state = out.param_groups.emplace_back();
    group_state.options = group_hyperparameters(group);
    for (const Tensor& p : group.params) {
      const std::string& pname = name_of.at(p.impl());
      group_state.params.push_back(pname);
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
  std::map<std::string, size_t> group_by_name;
  std::vector<std::vector<std::string>> group_members(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : groups_[g].params) {
      const std::string& pname = name_of.at(p.impl());
      param_by_name.emplace(pname, p);
      group_by_name.emplace(pname, g);
      group_members[g].push_back(pname);
    }
  }

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
  if (state.group_lrs.size() == groups_.size()) {
    std::vector<std::map<std::string, double>> own_groups;
    for (const auto& group : groups_) own_groups.push_back(group_hyperparameters(group));
    check_group_states(state, own, own_groups, group_members, problems);
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
    const std::string why = check_param_state(s, groups_[group_by_name.at(pname)]);
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
