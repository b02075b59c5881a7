// BatchShard: the rows of a global batch that one process (or one replica) trains on. Data-
// parallel training cuts every batch into shards along dim 0; each shard's forward runs where
// its rows live, and its gradient is that shard's share of the global batch's gradient.
//
//   rows [begin, begin + rows) of a global batch of `total` rows
//
// DistributedDataParallel::shard(total) gives this rank's shard of a batch every rank builds
// alike; DataParallel cuts the batch it is given into one shard per replica. Both run each
// shard's forward under a BatchRowsGuard (the BatchRows this struct extends), so random draws
// per row (dropout) are the whole batch's (Note [random draws of a batch shard] in
// core/generator.h). Across processes each shard's gradient is weighted by its share of the
// batch (Note [a shard's gradient weight] in parallel/gradient_reducer.cpp); DataParallel's
// replicas need no weight, as their shards' losses join in one loss over the whole batch
// (Note [why replica gradients are summed]).
#pragma once

#include <cstdint>

#include "core/generator.h"
#include "core/tensor.h"

namespace minidl::parallel {

struct BatchShard : BatchRows {
  // Every row of a batch of `total` rows (one device, one process).
  static BatchShard whole(int64_t total);
  // Part `part` of `parts` near-equal contiguous parts: rows [total*part/parts,
  // total*(part+1)/parts) — sizes differ by at most one (10 over 3: 3, 3, 4; 7 over 5:
  // 1, 1, 2, 1, 2). Throws unless 0 <= part < parts and parts <= total (every part gets a row).
  static BatchShard part_of(int64_t total, int part, int parts);

  // This shard's rows of `batch` [total, ...]: a view (narrow along dim 0). Throws naming the
  // shapes when batch.size(0) is not `total`.
  Tensor of(const Tensor& batch) const;
  bool is_whole() const { return begin == 0 && rows == total; }
};

}  // namespace minidl::parallel
