// nn::ReLU, nn::GELU and nn::Flatten: parameter-free layers.
#pragma once

#include <string>

#include "core/ops/gelu.h"
#include "nn/module.h"

namespace minidl::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
  std::shared_ptr<Module> clone() const override;
};

// GELU in either form, like torch.nn.GELU(approximate="none" | "tanh") (core/ops/gelu.h).
class GELU : public Module {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : approximate_(approximate) {}
  // "none" or "tanh", as PyTorch spells it; anything else is an Error.
  explicit GELU(const std::string& approximate) : approximate_(gelu_approximate_from_name(approximate)) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;
  GeluApproximate approximate() const { return approximate_; }

 private:
  GeluApproximate approximate_;
};

// Flattens dims [start_dim, end_dim] into one (default keeps the batch dim: [N, ...] -> [N, -1]).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Flatten"; }
  std::shared_ptr<Module> clone() const override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace minidl::nn
