// nn::Linear: y = x·Wᵀ + b with W [out, in] and b [out], initialised like torch.nn.Linear:
// W ~ kaiming_uniform(a = sqrt 5), i.e. U(±1/sqrt(in)), and b ~ U(±1/sqrt(in)).
#pragma once

#include <string>

#include "core/ops/gelu.h"
#include "nn/module.h"

namespace minidl::nn {

class Linear : public Module {
 public:
  // float32 on the CPU; move with to(). gen = null draws from the default generator.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);

  // x [..., in] -> [..., out]; when x's last dim is not in_features, ops::linear's error
  // (x's shape, weight's shape) after this layer's name().
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) with the relu fused into the GEMM epilogue (Sequential uses it).
  Tensor forward_relu(const Tensor& x);
  // gelu(forward(x), approximate) with the GELU fused into the GEMM epilogue (Sequential uses it).
  Tensor forward_gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  // Handles to the registered parameters (bias undefined when bias = false). Change their
  // values with copy_ (reassigning the handle would detach it from the module's registry).
  Tensor weight, bias;

 private:
  int64_t in_features_, out_features_;
};

}  // namespace minidl::nn
