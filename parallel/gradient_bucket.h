// GradientBucket: a group of parameters whose gradients are all-reduced together, from one
// flat buffer per replica. Buckets are filled in reverse registration order — roughly the
// order in which backward produces the gradients (the last layer's first) — so the first
// bucket is complete, and its all-reduce can start, while backward still runs through the
// earlier layers. One dtype per bucket (a flat buffer has one dtype).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace minidl::parallel {

struct GradientBucket {
  DType dtype = DType::Float32;
  std::vector<size_t> params;    // indices into the parameter list, in reverse registration order
  std::vector<int64_t> offsets;  // element offset of each parameter's gradient in the flat buffer
  int64_t numel = 0;             // elements of the flat buffer
  size_t bytes() const { return static_cast<size_t>(numel) * dtype_size(dtype); }
};

// Packs `params` (registration order) into buckets of at most `cap_bytes` each: walking the
// parameters from last to first, a parameter joins the open bucket of its dtype unless that
// would exceed the cap, in which case it opens a new one (a parameter larger than the cap gets
// a bucket of its own). Buckets are listed in the order they were opened. cap_bytes > 0.
std::vector<GradientBucket> assign_buckets(const std::vector<Tensor>& params, size_t cap_bytes);

}  // namespace minidl::parallel
