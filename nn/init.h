// nn::init: in-place parameter initialisers (PyTorch's torch.nn.init), drawing from a
// Generator (the default one when gen is null) so that the same seed gives the same model.
#pragma once

#include "core/tensor.h"

namespace minidl::nn::init {

// fan_in of a weight [out, in, ...]: in times the product of the trailing sizes.
int64_t fan_in(const Tensor& w);
// t ~ U[lo, hi), written in place (no autograd).
void uniform_(Tensor& t, double lo, double hi, Generator* gen = nullptr);
// t ~ N(mean, std²), written in place (no autograd); std >= 0.
void normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
// w ~ U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a²))
// (leaky-ReLU gain, fan_in mode). a = sqrt(5) gives bound = 1 / sqrt(fan_in): nn.Linear's default.
void kaiming_uniform_(Tensor& w, double a, Generator* gen = nullptr);

}  // namespace minidl::nn::init
