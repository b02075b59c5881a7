// 2-D pooling over NCHW tensors, as torch.nn.functional defines it (floor mode, no dilation):
// max_pool2d, avg_pool2d and adaptive_avg_pool2d to 1×1 (global average pooling).
#pragma once

#include <optional>

#include "core/conv_geometry.h"
#include "core/tensor.h"

namespace minidl::ops {

// x [N, C, H, W] -> [N, C, H_out, W_out], H_out = (H + 2·pad − KH) / stride + 1. stride
// defaults to the kernel size; padding may be at most half the kernel (PyTorch's rule).
// Backward sends each output's gradient to the first maximum of its window.
Tensor max_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0});
// The window's mean; count_include_pad divides by the window clipped to the padded input
// (PyTorch's default), otherwise by the input elements it covers.
Tensor avg_pool2d(const Tensor& x, Size2 kernel, std::optional<Size2> stride = std::nullopt, Size2 padding = {0, 0},
                  bool count_include_pad = true);
// Global average pooling: x [N, C, H, W] -> [N, C, 1, 1]. Only output_size (1, 1) is
// supported; another size is a clear error.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size = {1, 1});

}  // namespace minidl::ops
