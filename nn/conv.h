// nn::Conv2d: y = conv2d(x, W) + b over NCHW tensors, W [C_out, C_in/groups, KH, KW] and b
// [C_out], initialised like torch.nn.Conv2d: W ~ kaiming_uniform(a = sqrt 5), i.e.
// U(±1/sqrt(fan_in)) with fan_in = C_in/groups·KH·KW, and b ~ U(±1/sqrt(fan_in)).
#pragma once

#include <string>

#include "core/conv_geometry.h"
#include "nn/module.h"

namespace minidl::nn {

struct Conv2dOptions {
  Size2 stride = {1, 1};
  Size2 padding = {0, 0};
  Size2 dilation = {1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  // float32 on the CPU; move with to(). gen = null draws from the default generator.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         Generator* gen = nullptr);

  // x [N, C_in, H, W] -> [N, C_out, H_out, W_out] (ops::conv2d states the shape rule).
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Size2 kernel_size() const { return kernel_size_; }
  const Conv2dOptions& options() const { return options_; }

  Tensor weight, bias;  // bias undefined when options.bias = false

 private:
  int64_t in_channels_, out_channels_;
  Size2 kernel_size_;
  Conv2dOptions options_;
};

}  // namespace minidl::nn
