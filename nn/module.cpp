// nn::Module: registration, recursive traversal, device moves and state dicts.
#include "nn/module.h"

#include <sstream>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace minidl::nn {

Tensor Module::forward(const Tensor&) {
  throw Error(detail::make_message("Module ", name(), ": forward not implemented"));
}

void Module::check_new_name(const std::string& n, const char* what) const {
  MINIDL_CHECK(!n.empty(), "Module ", name(), ": ", what, " name must not be empty");
  MINIDL_CHECK(n.find('.') == std::string::npos, "Module ", name(), ": ", what, " name '", n,
               "' must not contain '.' (dots separate nested names)");
  auto taken = [&](const auto& list) {
    for (const auto& entry : list)
      if (entry.first == n) return true;
    return false;
  };
  MINIDL_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), "Module ", name(), ": cannot register ",
               what, " '", n, "': the name is already taken");
}

Tensor& Module::register_parameter(const std::string& n, Tensor t) {
  check_new_name(n, "parameter");
  MINIDL_CHECK(t.defined(), "Module ", name(), ": register_parameter('", n, "') got an undefined tensor");
  MINIDL_CHECK(is_floating(t.dtype()), "Module ", name(), ": parameter '", n, "' must be float32 or float64, got ",
               t.dtype());
  if (!t.is_leaf()) t = t.detach();  // a parameter is a leaf, like torch.nn.Parameter(t)
  t.requires_grad_(true);
  parameters_.emplace_back(n, std::move(t));
  return parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& n, Tensor t) {
  check_new_name(n, "buffer");
  MINIDL_CHECK(t.defined(), "Module ", name(), ": register_buffer('", n, "') got an undefined tensor");
  buffers_.emplace_back(n, std::move(t));
  return buffers_.back().second;
}

void Module::add_child(const std::string& n, std::shared_ptr<Module> m) {
  check_new_name(n, "submodule");
  MINIDL_CHECK(m != nullptr, "Module ", name(), ": register_module('", n, "') got a null module");
  MINIDL_CHECK(m.get() != this, "Module ", name(), ": cannot register a module as its own child ('", n, "')");
  if (m->registered_name_.empty()) m->registered_name_ = n;
  children_.emplace_back(n, std::move(m));
}

Tensor Module::operator()(const Tensor& x) {
  if (!profiler::active()) return forward(x);
  profiler::RecordScope scope(profile_label(), profiler::Kind::Module, {&x});
  return forward(x);
}

std::string Module::profile_label() const {
  std::string type = name();  // "Linear(in_features=8, ...)": the type is what precedes '('
  type = type.substr(0, type.find('('));
  return registered_name_.empty() ? type : registered_name_ + " (" + type + ")";
}

void Module::collect_parameters(const std::string& prefix, std::vector<NamedTensor>& out,
                                std::unordered_set<const TensorImpl*>* seen) const {
  for (const auto& [n, t] : parameters_)
    if (!seen || seen->insert(t.impl()).second) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect_parameters(prefix + n + ".", out, seen);
}

void Module::collect_buffers(const std::string& prefix, std::vector<NamedTensor>& out,
                             std::unordered_set<const TensorImpl*>* seen) const {
  for (const auto& [n, t] : buffers_)
    if (!seen || seen->insert(t.impl()).second) out.emplace_back(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect_buffers(prefix + n + ".", out, seen);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  std::unordered_set<const TensorImpl*> seen;
  collect_parameters("", out, &seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  std::unordered_set<const TensorImpl*> seen;
  collect_buffers("", out, &seen);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_state() const {
  std::vector<NamedTensor> out;
  collect_parameters("", out, nullptr);
  collect_buffers("", out, nullptr);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

namespace {
// Note [moving a tensor in place]: the TensorImpl stays and takes the data of a copy on the
// new device (Tensor::set_data_), so every handle (optimizer, user) follows.
void move_in_place(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  Tensor handle = t;  // set_data_ changes the shared TensorImpl, not this handle
  handle.set_data_(t.detach().to(device));
}
}  // namespace

Module& Module::to(Device device) {
  backend_for(device);  // throws for a device without a backend before anything has moved
  // set_data_ refuses a non-leaf (a buffer registered as an op's result with its graph): say so
  // before anything has moved, not halfway through.
  for (const auto& [n, t] : named_state())
    MINIDL_CHECK(t.is_leaf() || t.device() == device, "Module ", name(), ": to(", device, "): '", n,
                 "' is the result of an op (", t.grad_fn()->name(), ") with its graph, which cannot move in place; "
                 "register it detached (register_buffer(name, t.detach()))");
  NoGradGuard no_grad;
  for (auto& [n, p] : named_parameters()) {
    move_in_place(p, device);
    move_in_place(p.grad(), device);
  }
  for (auto& [n, b] : named_buffers()) move_in_place(b, device);
  return *this;
}

std::shared_ptr<Module> Module::clone() const {
  throw Error(detail::make_message("Module ", name(), ": clone() is not implemented; override clone() in the model, or "
                                   "derive it from nn::Cloneable<Model> when it is default-constructible (replicating a "
                                   "model, e.g. for parallel::DataParallel, needs it)"));
}

void Module::check_clone_is_exact(const std::type_info& layer, const char* layer_name) const {
  MINIDL_CHECK(typeid(*this) == layer, "Module ", name(), ": clone() is inherited from nn::", layer_name,
               " and would copy only the ", layer_name, " part; override clone() in the subclass");
}

void Module::copy_state_from(const Module& source) {
  const std::vector<NamedTensor> own = named_state(), theirs = source.named_state();
  bool same = own.size() == theirs.size();
  for (size_t i = 0; same && i < own.size(); ++i)
    same = own[i].first == theirs[i].first && own[i].second.shape() == theirs[i].second.shape();
  MINIDL_CHECK(same, "Module ", name(), ": clone() built a module whose parameters and buffers differ from those of ",
               source.name(), " (names or shapes); its constructor must rebuild the same structure");
  NoGradGuard no_grad;
  for (size_t i = 0; i < own.size(); ++i) {
    move_in_place(own[i].second, theirs[i].second.device());
    Tensor dst = own[i].second;
    dst.copy_(theirs[i].second);
  }
  copy_training_flags(source);
}

void Module::copy_training_flags(const Module& source) {
  training_ = source.training_;
  for (size_t i = 0; i < children_.size() && i < source.children_.size(); ++i)
    children_[i].second->copy_training_flags(*source.children_[i].second);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  // Not de-duplicated: a shared tensor is saved under each of its names, as in PyTorch.
  StateDict sd;
  for (auto& [n, t] : named_state()) sd.emplace(n, t.detach());
  return sd;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  const std::vector<NamedTensor> own = named_state();

  std::vector<std::string> missing, unexpected, mismatched;
  std::map<std::string, const Tensor*> own_by_name;
  for (const auto& [n, t] : own) {
    own_by_name.emplace(n, &t);
    auto it = sd.find(n);
    if (it == sd.end()) {
      missing.push_back(n);
    } else if (!it->second.defined()) {
      mismatched.push_back(n + ": expected shape " + t.shape().str() + ", got an undefined tensor");
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(n + ": expected shape " + t.shape().str() + ", got " + it->second.shape().str());
    }
  }
  for (const auto& [n, t] : sd)
    if (!own_by_name.count(n)) unexpected.push_back(n);

  const bool key_errors = strict && (!missing.empty() || !unexpected.empty());
  if (key_errors || !mismatched.empty()) {
    std::ostringstream os;
    os << "Module " << name() << ": load_state_dict failed (nothing was loaded)";
    auto list = [&](const char* title, const std::vector<std::string>& items) {
      if (items.empty()) return;
      os << "; " << title << ": ";
      for (size_t i = 0; i < items.size(); ++i) os << (i ? ", " : "") << items[i];
    };
    if (strict) {
      list("missing keys", missing);
      list("unexpected keys", unexpected);
    }
    list("shape mismatches", mismatched);
    throw Error(os.str());
  }

  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = sd.find(n);
    if (it == sd.end()) continue;  // non-strict: keep the current value
    Tensor dst = t;
    dst.copy_(it->second);
  }
}

}  // namespace minidl::nn
