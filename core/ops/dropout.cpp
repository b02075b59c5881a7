// dropout: a Philox mask of 0 and 1/(1 − p) (backend dropout_mask), then x · mask through
// the elementwise multiply, whose gradient (dy · mask) is the dropout gradient.
#include "core/ops/dropout.h"

#include "core/backend.h"
#include "core/ops/elementwise.h"
#include "core/profiler.h"

namespace minidl::ops {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  profiler::RecordScope profile_scope("dropout", profiler::Kind::Op, {&x});
  check_defined(x, "dropout", "x");
  MINIDL_CHECK(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p, " (x ", x.shape(), ")");
  MINIDL_CHECK(is_floating(x.dtype()), "dropout: x must be a floating dtype (float32, float64, bfloat16, float16), got ", x.dtype(), " with shape ",
               x.shape());
  check_backend_computes(x, "dropout", "x");
  if (!training || p == 0) return x;
  Tensor mask = empty(x.shape(), x.options());  // no grad: a constant of the graph
  // Counters by rows: a forward on a shard of a batch draws its rows of the whole batch's mask,
  // and advances the generator as for the whole batch even with no rows at all (Note [random
  // draws of a batch shard] in core/generator.h).
  // A 0-dim x has no rows: one counter of its own.
  int64_t per_row = 1;
  for (int d = 1; d < x.dim(); ++d) per_row *= x.shape()[d];
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed();
  const uint64_t offset = x.dim() == 0 ? g.reserve(1) : reserve_rows(g, x.shape()[0], static_cast<uint64_t>(per_row));
  if (mask.numel() > 0) backend_for(x.device()).dropout_mask(mask, p, seed, offset);
  return mul(x, mask);
}

}  // namespace minidl::ops
