// nn::Sequential: runs its children in order; child i is registered under the name "i", so
// parameters read "0.weight", "2.bias". A Linear directly followed by a ReLU runs as one
// fused linear+relu kernel (same values and gradients as the two layers run apart).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace minidl::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return layers_.size(); }
  // Throws when i >= size().
  std::shared_ptr<Module> operator[](size_t i) const;

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  // Clones every layer (each must implement clone()).
  std::shared_ptr<Module> clone() const override;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace minidl::nn
