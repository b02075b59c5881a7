// nn::BatchNorm2d: batch normalisation of [N, C, H, W] per channel, like torch.nn.BatchNorm2d.
// Parameters (affine): weight γ = 1, bias β = 0. Buffers (track_running_stats): running_mean
// = 0, running_var = 1, num_batches_tracked = 0 (int64, 0-dim). state_dict, checkpoints,
// to() and DataParallel's broadcast carry the buffers with the parameters.
// Training mode normalises with the batch statistics and updates the running ones (momentum);
// evaluation mode (eval()) normalises with the running statistics.
#pragma once

#include <string>

#include "nn/module.h"

namespace minidl::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});

  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

  int64_t num_features() const { return num_features_; }

  // Handles to the registered tensors (undefined when switched off by the options).
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 private:
  int64_t num_features_;
  BatchNormOptions options_;
};

}  // namespace minidl::nn
