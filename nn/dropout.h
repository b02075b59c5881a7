// nn::Dropout: inverted dropout in training mode (each element zeroed with probability p, the
// rest scaled by 1/(1 − p)), the identity in evaluation mode. Masks are drawn from the
// default generator, so a run seeded the same way drops the same elements.
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace minidl::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;
  double p() const { return p_; }

 private:
  double p_;
};

// Reshapes dim `dim` into `sizes` ([N, 784] -> [N, 1, 28, 28] with dim 1, sizes {1, 28, 28}),
// as torch.nn.Unflatten: a view, the inverse of Flatten.
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, std::vector<int64_t> sizes);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Unflatten"; }
  std::shared_ptr<Module> clone() const override;

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

}  // namespace minidl::nn
