// nn::ReLU and nn::Flatten forwards.
#include "nn/activation.h"

#include "core/ops/elementwise.h"

namespace minidl::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim_, end_dim_); }

}  // namespace minidl::nn
