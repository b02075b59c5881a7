// scatter / gather: narrow + to, to + cat.
#include "parallel/scatter_gather.h"

#include <algorithm>

#include "core/ops/view.h"

namespace minidl::parallel {

std::vector<int64_t> shard_sizes(int64_t batch, int replicas) {
  MINIDL_CHECK(batch > 0, "scatter: the batch is empty (size 0 along dim 0); nothing to split over the replicas");
  MINIDL_CHECK(replicas > 0, "scatter: need at least one replica, got ", replicas);
  const int64_t shards = std::min<int64_t>(batch, replicas);
  const int64_t base = batch / shards, larger = batch % shards;
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < shards; ++i) sizes.push_back(base + (i < larger ? 1 : 0));
  return sizes;
}

std::vector<Tensor> scatter(const Tensor& x, const std::vector<int64_t>& sizes, const std::vector<Device>& devices) {
  check_defined(x, "scatter", "x");
  MINIDL_CHECK(x.dim() >= 1, "scatter: expected a batch with at least one dim, got a scalar");
  MINIDL_CHECK(sizes.size() <= devices.size(), "scatter: ", sizes.size(), " shards for ", devices.size(), " devices");
  std::vector<Tensor> shards;
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor shard = sizes.size() == 1 ? x : ops::narrow(x, 0, start, sizes[i]);
    shards.push_back(ops::to(shard, devices[i], shard.dtype()));
    start += sizes[i];
  }
  MINIDL_CHECK(start == x.size(0), "scatter: shard sizes sum to ", start, ", the batch has ", x.size(0), " rows");
  return shards;
}

Tensor gather(const std::vector<Tensor>& outputs, Device device) {
  MINIDL_CHECK(!outputs.empty(), "gather: no outputs");
  std::vector<Tensor> moved;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_defined(outputs[i], "gather", "outputs[i]");
    MINIDL_CHECK(outputs[i].dim() >= 1, "gather: output ", i, " is a scalar; replica outputs are concatenated along "
                 "dim 0, so each must keep the batch dimension");
    moved.push_back(ops::to(outputs[i], device, outputs[i].dtype()));
  }
  return moved.size() == 1 ? moved[0] : ops::cat(moved, 0);
}

}  // namespace minidl::parallel
