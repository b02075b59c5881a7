// nn::Module: the base of every layer and model. A module owns named parameters (leaf
// tensors that require grad), named buffers (state that is saved but not trained) and named
// submodules, all kept in registration order so that parameters(), state_dict() and the
// optimizer see the same order every run. Names of nested tensors are dotted: "fc1.weight".
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace minidl::nn {

// Name -> tensor, for saving and loading (params and buffers together).
using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;

  // Default throws "Module <name>: forward not implemented".
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  virtual std::string name() const { return "Module"; }

  // Registers t as a parameter and marks it requires_grad (a non-leaf t is detached first,
  // like wrapping it in torch.nn.Parameter). The returned reference stays valid for the
  // module's lifetime. Names must be non-empty, contain no '.', and be unique in this module.
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    add_child(name, m);
    return m;
  }

  // Recursive, in registration order (own tensors first, then each child's); a tensor shared
  // by two submodules is listed once, under its first name.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Direct children only.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;

  // Training flag, set recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter, buffer and gradient to `device` IN PLACE: each keeps its
  // TensorImpl and gets new storage, so handles held by optimizers stay valid.
  Module& to(Device device);

  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();

  // Parameters and buffers under their dotted names; the tensors are detached views that
  // share storage with the module's.
  StateDict state_dict() const;
  // Copies values into the existing tensors (in place, no autograd). Throws one error that
  // lists the missing keys and unexpected keys (strict only) and every "key: expected shape
  // X, got Y" (always); nothing is copied when it throws.
  void load_state_dict(const StateDict& sd, bool strict = true);

 private:
  using NamedTensor = std::pair<std::string, Tensor>;
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name, const char* what) const;
  // Appends (prefix + name, tensor) for this module and its children, depth first.
  void collect_parameters(const std::string& prefix, std::vector<NamedTensor>& out,
                          std::unordered_set<const TensorImpl*>* seen) const;
  void collect_buffers(const std::string& prefix, std::vector<NamedTensor>& out,
                       std::unordered_set<const TensorImpl*>* seen) const;

  // std::deque keeps references returned by register_* valid as more are added.
  std::deque<NamedTensor> parameters_;
  std::deque<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace minidl::nn
