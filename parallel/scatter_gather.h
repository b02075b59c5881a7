// Scatter and gather along dim 0 for DataParallel: the batch is cut into contiguous shards,
// one per replica, and the replicas' outputs are concatenated back, in replica order, on
// the first device. Both are differentiable (narrow, to and cat record autograd nodes), so
// the loss computed on the gathered output sends each replica the gradient of its rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace minidl::parallel {

// Sizes of the shards of a batch of `batch` rows over `replicas`: min(batch, replicas)
// shards, differing by at most one, the larger first (10 over 3 -> 4, 3, 3; 2 over 4 -> 1, 1).
// batch > 0 and replicas > 0.
std::vector<int64_t> shard_sizes(int64_t batch, int replicas);

// x cut along dim 0 into shards of `sizes` (which sum to x.size(0)), shard i moved to
// devices[i]. A shard on x's own device is a view, not a copy.
std::vector<Tensor> scatter(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<Device>& devices);

// The outputs moved to `device` and concatenated along dim 0 (one output: it, moved).
Tensor gather(const std::vector<Tensor>& outputs, Device device);

}  // namespace minidl::parallel
