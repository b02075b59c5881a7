// nn::MaxPool2d, nn::AvgPool2d and nn::AdaptiveAvgPool2d (to 1×1): parameter-free pooling
// layers over NCHW tensors (core/ops/pool.h has the math).
#pragma once

#include <optional>
#include <string>

#include "core/conv_geometry.h"
#include "nn/module.h"

namespace minidl::nn {

class MaxPool2d : public Module {
 public:
  // stride defaults to the kernel size, as in PyTorch.
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  Size2 kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0},
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<Module> clone() const override;

 private:
  Size2 kernel_, stride_, padding_;
  bool count_include_pad_;
};

// Global average pooling: [N, C, H, W] -> [N, C, 1, 1]; only output size (1, 1).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size = {1, 1});
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d(output_size=(1, 1))"; }
  std::shared_ptr<Module> clone() const override;
};

}  // namespace minidl::nn
