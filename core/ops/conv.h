// conv2d over NCHW tensors, as PyTorch's torch.nn.functional.conv2d defines it: stride,
// padding, dilation per (height, width) and grouped channels.
#pragma once

#include "core/conv_geometry.h"
#include "core/tensor.h"

namespace minidl::ops {

// x [N, C_in, H, W], w [C_out, C_in/groups, KH, KW], b [C_out] (may be undefined)
//   -> y [N, C_out, H_out, W_out], H_out = (H + 2·pad − dilation·(KH − 1) − 1) / stride + 1.
// Throws a minidl::Error naming the shapes for a wrong rank, channels that disagree with
// the weight or the groups, a stride or dilation below 1, negative padding, or a kernel that
// does not fit in the padded input.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Size2 stride = {1, 1},
              Size2 padding = {0, 0}, Size2 dilation = {1, 1}, int64_t groups = 1);

// The checked geometry of conv2d(x, w) with these settings (what the op passes the backend).
Conv2dGeometry conv2d_geometry(const Shape& x, const Shape& w, Size2 stride, Size2 padding, Size2 dilation,
                               int64_t groups);

}  // namespace minidl::ops
