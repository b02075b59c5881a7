// DistributedSampler: the shard of a dataset that one rank of a process group visits in an
// epoch, PyTorch's torch.utils.data.DistributedSampler. Every rank builds the same order of the
// whole dataset — shuffled from (seed, epoch) like RandomSampler, or 0..n-1 — and takes every
// world_size-th index of it starting at its rank: rank r gets order[r], order[r + W], ... So the
// ranks' shards are disjoint, and their union is the dataset.
//
// Equal lengths (every rank must run the same number of steps, or one would wait forever in a
// collective): with drop_last = false the order is padded by repeating its first indices until
// its length is a multiple of W, so every rank gets ceil(n / W) indices and a few examples are
// seen twice per epoch; with drop_last = true its tail is cut to a multiple of W, so every rank
// gets floor(n / W) and a few examples are skipped per epoch.
//
// The epoch is the argument of indices(epoch) (the Sampler interface; DataLoader passes its
// own), or the one set_epoch() stored, for indices(): a new epoch reshuffles, identically on
// every rank, and nothing else changes the order.
//
// With a per-rank batch of b, batch j of rank r holds order[(j*b + i)*W + r]: the union over the
// ranks of their batch j is batch j of a one-process loader over the same order with batch b*W.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sampler.h"

namespace minidl::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;       // must be the same on every rank
  bool drop_last = false;  // false: pad to equal lengths; true: drop the tail
};

class DistributedSampler final : public Sampler {
 public:
  // n examples, this process's rank of world_size (0 <= rank < world_size).
  DistributedSampler(int64_t n, int world_size, int rank, DistributedSamplerOptions options = {});

  std::vector<int64_t> indices(int64_t epoch) const override;
  std::vector<int64_t> indices() const { return indices(epoch_); }
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  int64_t size() const { return per_rank_; }        // indices per rank per epoch
  int64_t total_size() const { return per_rank_ * world_size_; }  // over all ranks (padded or cut)
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

 private:
  int64_t n_;
  int world_size_, rank_;
  DistributedSamplerOptions options_;
  int64_t per_rank_;
  int64_t epoch_ = 0;
};

}  // namespace minidl::data
