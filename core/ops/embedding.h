// embedding: rows of a table picked by integer indices, as torch.nn.functional.embedding.
#pragma once

#include "core/tensor.h"

namespace minidl::ops {

// indices int64 of any shape (a 0-dim one too), weight [V, D] float32 or float64 on the same
// device -> [*indices.shape, D], out[..., :] = weight[indices[...], :]. An index outside [0, V)
// is an Error naming the op, the index, its position and V; on CUDA it comes at the next point
// where the host waits for the device (Note [deferred target errors], kernels/cuda/cross_entropy.cu).
// The gradient flows to weight only: dweight[v] sums the output-gradient rows of every position
// holding v, in position order, with no floating-point atomics (the same bits every run).
Tensor embedding(const Tensor& indices, const Tensor& weight);

}  // namespace minidl::ops
