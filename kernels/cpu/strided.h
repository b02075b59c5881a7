// Walking a strided tensor in row-major order: an N-d counter that carries offsets for up to
// two strided operands, so that kernels read views (broadcast, transposed, narrowed) in place.
#pragma once

#include <cstdint>

#include "core/shape.h"

namespace minidl::cpu {

// Calls f(i, offset_a, offset_b) for i = 0..numel-1 in row-major order of `shape`, where
// offset_x = Σ index_d · strides_x[d] (element offsets relative to each tensor's start).
template <typename F>
void for_each_strided(const Shape& shape, const Shape& strides_a, const Shape& strides_b, F&& f) {
  const int rank = shape.rank();
  const int64_t numel = shape.numel();
  if (numel == 0) return;
  if (rank == 0) {
    f(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  int64_t index[Shape::kMaxRank] = {};
  int64_t oa = 0, ob = 0;
  const int last = rank - 1;
  const int64_t inner = shape[last], sa = strides_a[last], sb = strides_b[last];
  for (int64_t i = 0; i < numel; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(i + j, oa + j * sa, ob + j * sb);
    // Advance the outer counters (dims 0..last-1) by one.
    for (int d = last - 1; d >= 0; --d) {
      oa += strides_a[d];
      ob += strides_b[d];
      if (++index[d] < shape[d]) break;
      oa -= strides_a[d] * shape[d];
      ob -= strides_b[d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace minidl::cpu
