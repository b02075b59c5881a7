// DistributedSampler: the whole order (RandomSampler's or sequential), padded or cut to a
// multiple of the world size, then every world_size-th index from the rank's.
#include "data/distributed_sampler.h"

#include "core/error.h"

namespace minidl::data {

DistributedSampler::DistributedSampler(int64_t n, int world_size, int rank, DistributedSamplerOptions options)
    : n_(n), world_size_(world_size), rank_(rank), options_(options) {
  MINIDL_CHECK(n >= 0, "DistributedSampler: negative dataset size ", n);
  MINIDL_CHECK(world_size >= 1, "DistributedSampler: the world size must be at least 1, got ", world_size);
  MINIDL_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank, " is out of range for world size ",
               world_size, " (0 <= rank < world size)");
  const int64_t w = world_size;
  per_rank_ = options_.drop_last ? n / w : n / w + (n % w != 0 ? 1 : 0);
  MINIDL_CHECK(per_rank_ > 0 || n == 0, "DistributedSampler: with drop_last, ", n, " example(s) over ", world_size,
               " ranks leave every rank with none; use fewer ranks or drop_last = false");
}

void DistributedSampler::set_epoch(int64_t epoch) {
  MINIDL_CHECK(epoch >= 0, "DistributedSampler: set_epoch: negative epoch ", epoch);
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  MINIDL_CHECK(epoch >= 0, "DistributedSampler: negative epoch ", epoch);
  std::vector<int64_t> order =
      options_.shuffle ? RandomSampler(n_, options_.seed).indices(epoch) : SequentialSampler(n_).indices(epoch);
  const int64_t total = total_size();
  // Pad by repeating the order from its start (more than once when n < world size), as PyTorch.
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[static_cast<size_t>(i)]);
  order.resize(static_cast<size_t>(total));  // drop_last: cut the tail
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace minidl::data
