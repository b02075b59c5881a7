// scaled_dot_product_attention, as torch.nn.functional.scaled_dot_product_attention without a
// mask tensor: one fused op that never stores the [L, S] matrix of scores.
#pragma once

#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace minidl::ops {

// out = dropout(softmax(q·kᵀ·scale + causal mask)) · v over the last two dims:
//   q [..., L, E], k [..., S, E], v [..., S, Ev] -> out [..., L, Ev]
// The leading dims (any number, none included) must be equal (no broadcasting); q, k, v share
// a floating dtype the device computes in, and a device. scale defaults to 1/sqrt(E).
// causal: PyTorch's is_causal, the top-left aligned lower triangle of ones(L, S): query i sees
// keys j <= i. Every query row sees key 0, so no row is ever fully masked (L > S included:
// rows i >= S see every key).
// dropout_p in [0, 1): each attention probability is kept with probability 1 − dropout_p and
// scaled by 1/(1 − dropout_p), from Philox counters of `gen` (the default generator when null),
// one per element (batch..., i, j) of the virtual [..., L, S] matrix: the same generator state
// gives the same mask on every device, and backward regenerates it. 0 means no dropout (pass 0
// in evaluation, as in PyTorch).
// Inputs may be strided views (a head split of a fused qkv projection): only the last dim
// must have stride 1, else that input is copied. out and the gradients are contiguous.
// Sizes: E >= 1; L, S or Ev of 0 give an empty or zero output. A device may cap E and Ev
// (CUDA: 128), which the error names.
// Gradients flow to q, k and v.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                    double dropout_p = 0.0, Generator* gen = nullptr,
                                    std::optional<double> scale = std::nullopt);

}  // namespace minidl::ops
