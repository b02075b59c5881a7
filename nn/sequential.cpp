// nn::Sequential: in-order forward with the Linear -> ReLU and Linear -> GELU fusions, and a
// layer-by-layer clone.
#include "nn/sequential.h"

#include <typeinfo>

#include "nn/activation.h"
#include "nn/linear.h"

namespace minidl::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  MINIDL_CHECK(m != nullptr, "Sequential: push_back got a null module (position ", layers_.size(), ")");
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  MINIDL_CHECK(i < layers_.size(), "Sequential: index ", i, " is out of range for ", layers_.size(), " modules");
  return layers_[i];
}

std::shared_ptr<Module> Sequential::clone() const {
  check_clone_is_exact(typeid(Sequential), "Sequential");
  auto copy = std::make_shared<Sequential>();
  for (const auto& layer : layers_) copy->push_back(layer->clone());
  copy->copy_state_from(*this);  // own training flag (the layers' values came with their clones)
  return copy;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Module& layer = *layers_[i];
    // Fuse only the exact classes: a subclass may override forward and mean something else.
    const bool linear = typeid(layer) == typeid(Linear);
    const bool relu_next = i + 1 < layers_.size() && typeid(*layers_[i + 1]) == typeid(ReLU);
    const bool gelu_next = i + 1 < layers_.size() && typeid(*layers_[i + 1]) == typeid(GELU);
    if (linear && (relu_next || gelu_next)) {  // the fused call opens the layer's profiler range
      auto& lin = static_cast<Linear&>(layer);
      h = relu_next ? lin.forward_relu(h) : lin.forward_gelu(h, static_cast<GELU&>(*layers_[i + 1]).approximate());
      ++i;  // the activation ran in the linear's epilogue
    } else {
      h = layer(h);
    }
  }
  return h;
}

}  // namespace minidl::nn
