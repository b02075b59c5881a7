// BatchShard: the split of a batch into parts, and a shard's view of a batch.
#include "parallel/batch_shard.h"

#include "core/ops/view.h"

namespace minidl::parallel {

BatchShard BatchShard::whole(int64_t total) {
  MINIDL_CHECK(total >= 0, "BatchShard::whole: a batch of ", total, " rows");
  return BatchShard{{.begin = 0, .rows = total, .total = total}};
}

BatchShard BatchShard::part_of(int64_t total, int part, int parts) {
  MINIDL_CHECK(parts >= 1 && part >= 0 && part < parts, "BatchShard::part_of: part ", part, " of ", parts,
               " parts does not exist");
  MINIDL_CHECK(total >= parts, "BatchShard::part_of: a batch of ", total, " rows cannot be shared by ", parts,
               " parts, each needs at least one row");
  const int64_t begin = total * part / parts, end = total * (part + 1) / parts;
  return BatchShard{{.begin = begin, .rows = end - begin, .total = total}};
}

Tensor BatchShard::of(const Tensor& batch) const {
  check_defined(batch, "BatchShard::of", "batch");
  MINIDL_CHECK(batch.dim() >= 1 && batch.size(0) == total, "BatchShard::of: rows [", begin, ", ", begin + rows,
               ") of a batch of ", total, " rows, but the batch has shape ", batch.shape());
  return is_whole() ? batch : ops::narrow(batch, 0, begin, rows);
}

}  // namespace minidl::parallel
