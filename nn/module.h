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
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace minidl::nn {

// Name -> tensor, for saving and loading (params and buffers together).
using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;

  // Default throws "Module <name>: forward not implemented".
  virtual Tensor forward(const Tensor& x);
  // forward(x), inside a profiler range named by profile_label() while the profiler records
  // (core/profiler.h).
  Tensor operator()(const Tensor& x);
  // The profiler's name for this module's calls: its name in the first module it was
  // registered in and its type (name() up to its first '('), "fc1 (Linear)"; just its type
  // when it has no parent.
  std::string profile_label() const;
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
  // Every parameter, then every buffer, under its dotted name, each walk in registration order
  // (own tensors first, then each child's): the order of state_dict(), load_state_dict() and
  // clone(). Not de-duplicated: a tensor shared by two submodules appears under each of its
  // names, as in a checkpoint. The tensors are the module's own handles (not detached views),
  // so writing into one writes into the module.
  std::vector<std::pair<std::string, Tensor>> named_state() const;
  // Direct children only.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;

  // Training flag, set recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Gives this module and its children (matched by position) the training flags of `source`
  // and its children: what a replica does to follow its original (parallel::DataParallel).
  void copy_training_flags(const Module& source);

  // Moves every parameter, buffer and gradient to `device` IN PLACE: each keeps its
  // TensorImpl and gets new storage, so handles held by optimizers stay valid.
  Module& to(Device device);

  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True).
  void zero_grad();

  // A deep copy: the same structure, parameters and buffers holding the same values in new
  // storage on the same devices (leaves that require grad, without gradients), the same
  // training flags. The base throws naming the module: a model implements it, or derives from
  // nn::Cloneable<Model> when it is default-constructible. parallel::DataParallel builds its
  // replicas with it.
  virtual std::shared_ptr<Module> clone() const;

  // Parameters and buffers under their dotted names; the tensors are detached views that
  // share storage with the module's.
  StateDict state_dict() const;
  // Copies values into the existing tensors (in place, no autograd). Throws one error that
  // lists the missing keys and unexpected keys (strict only) and every "key: expected shape
  // X, got Y" (always); nothing is copied when it throws.
  void load_state_dict(const StateDict& sd, bool strict = true);

 protected:
  // For clone(): gives this module, built with the same structure as `source`, source's
  // parameter and buffer values and devices, and its training flags (recursively). Throws,
  // changing nothing, when the names or shapes differ.
  void copy_state_from(const Module& source);
  // For clone() of a library layer: a subclass that did not override clone() would be
  // copied as the base class, so clone() throws instead, naming both.
  void check_clone_is_exact(const std::type_info& layer, const char* layer_name) const;

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
  std::string registered_name_;  // its name in the first module that registered it (profile_label)
};

// clone() for a default-constructible model: `struct Model : nn::Cloneable<Model> {...}`.
// The copy is default-constructed (with the default generator's state put back afterwards,
// so cloning draws no random numbers from it), then given this module's values.
template <typename Derived>
class Cloneable : public Module {
 public:
  std::shared_ptr<Module> clone() const override {
    static_assert(std::is_default_constructible_v<Derived>,
                  "nn::Cloneable<Derived>: Derived must be default-constructible (or override clone())");
    struct RestoreGenerator {
      GeneratorState saved = default_generator().state();
      ~RestoreGenerator() { default_generator().set_state(saved); }
    };
    std::shared_ptr<Derived> copy;
    {
      RestoreGenerator restore;
      copy = std::make_shared<Derived>();
    }
    copy->copy_state_from(*this);
    return copy;
  }
};

}  // namespace minidl::nn
