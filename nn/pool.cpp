// nn pooling layers: forwards to core/ops/pool and clones.
#include "nn/pool.h"

#include <typeinfo>

#include "core/conv_geometry.h"
#include "core/ops/pool.h"

namespace minidl::nn {

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding)
    : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, kernel_, stride_, padding_); }

std::string MaxPool2d::name() const {
  return "MaxPool2d(kernel_size=" + size2_str(kernel_) + ", stride=" + size2_str(stride_) + ", padding=" + size2_str(padding_) + ")";
}

std::shared_ptr<Module> MaxPool2d::clone() const {
  check_clone_is_exact(typeid(MaxPool2d), "MaxPool2d");
  auto copy = std::make_shared<MaxPool2d>(kernel_, stride_, padding_);
  copy->copy_state_from(*this);
  return copy;
}

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool count_include_pad)
    : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding),
      count_include_pad_(count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return ops::avg_pool2d(x, kernel_, stride_, padding_, count_include_pad_);
}

std::string AvgPool2d::name() const {
  return "AvgPool2d(kernel_size=" + size2_str(kernel_) + ", stride=" + size2_str(stride_) + ", padding=" + size2_str(padding_) +
         ", count_include_pad=" + (count_include_pad_ ? "true" : "false") + ")";
}

std::shared_ptr<Module> AvgPool2d::clone() const {
  check_clone_is_exact(typeid(AvgPool2d), "AvgPool2d");
  auto copy = std::make_shared<AvgPool2d>(kernel_, stride_, padding_, count_include_pad_);
  copy->copy_state_from(*this);
  return copy;
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) {
  MINIDL_CHECK(output_size[0] == 1 && output_size[1] == 1,
               "AdaptiveAvgPool2d: only output size (1, 1) (global average pooling) is supported, got ",
               size2_str(output_size));
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return ops::adaptive_avg_pool2d(x, {1, 1}); }

std::shared_ptr<Module> AdaptiveAvgPool2d::clone() const {
  check_clone_is_exact(typeid(AdaptiveAvgPool2d), "AdaptiveAvgPool2d");
  auto copy = std::make_shared<AdaptiveAvgPool2d>();
  copy->copy_state_from(*this);
  return copy;
}

}  // namespace minidl::nn
