// nn::LayerNorm: layer normalisation over the last dim, like torch.nn.LayerNorm(D).
// Parameters (elementwise_affine): weight γ [D] = 1 and, unless bias = false, bias β [D] = 0.
// No buffers: the statistics are each row's own, in training and in evaluation alike.
#pragma once

#include <string>

#include "nn/module.h"

namespace minidl::nn {

class LayerNorm : public Module {
 public:
  // float32 on the CPU; move with to().
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);

  // x [..., D] -> the same shape; a clear error when x's last dim is not D.
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

  int64_t normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }

  // Handles to the registered parameters (undefined when switched off).
  Tensor weight, bias;

 private:
  int64_t normalized_shape_;
  double eps_;
  bool elementwise_affine_, with_bias_;
};

}  // namespace minidl::nn
