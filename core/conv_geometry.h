// The geometry of a 2-D convolution or pooling window over NCHW tensors: what the op layer
// (core/ops/conv.cpp, core/ops/pool.cpp) checks and computes once, and what every backend's
// kernels read. Sizes follow PyTorch's definitions:
//   H_out = floor((H + 2·pad_h − dilation_h·(KH − 1) − 1) / stride_h) + 1   (W likewise)
// so input row ih = oh·stride_h − pad_h + i·dilation_h feeds output row oh through kernel row i.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace minidl {

// (height, width) pairs for kernel sizes, strides, paddings and dilations.
using Size2 = std::array<int64_t, 2>;

// "(h, w)": a Size2 as the op layer's error messages print it.
inline std::string size2_str(Size2 s) {
  std::string out("(");
  out.append(std::to_string(s[0])).append(", ").append(std::to_string(s[1])).append(")");
  return out;
}

struct Conv2dGeometry {
  int64_t n = 0, c_in = 0, h = 0, w = 0;  // x [N, C_in, H, W]
  int64_t c_out = 0, kh = 0, kw = 0;      // weight [C_out, C_in / groups, KH, KW]
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int64_t h_out = 0, w_out = 0;  // y [N, C_out, H_out, W_out]

  int64_t c_in_per_group() const { return c_in / groups; }
  int64_t c_out_per_group() const { return c_out / groups; }
  // Rows of the im2col matrix of one group: (c, i, j) for c < C_in/groups, i < KH, j < KW.
  int64_t col_rows_per_group() const { return c_in_per_group() * kh * kw; }
  int64_t spatial_out() const { return h_out * w_out; }
};

// A pooling window (max or average) over each [H, W] plane of x [N, C, H, W]; no dilation.
struct Pool2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t h_out = 0, w_out = 0;
  // Average pooling: divide by the whole window, padding included (PyTorch's default), or
  // by the number of input elements it covers.
  bool count_include_pad = true;
};

}  // namespace minidl
