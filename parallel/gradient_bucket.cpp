// assign_buckets: reverse registration order, one open bucket per dtype, a byte cap.
#include "parallel/gradient_bucket.h"

#include <map>

namespace minidl::parallel {

std::vector<GradientBucket> assign_buckets(const std::vector<Tensor>& params, size_t cap_bytes) {
  MINIDL_CHECK(cap_bytes > 0, "assign_buckets: the bucket cap must be positive (bytes), got 0");
  std::vector<GradientBucket> buckets;
  std::map<DType, size_t> open;  // dtype -> index of its open bucket
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    MINIDL_CHECK(p.defined(), "assign_buckets: parameter ", k, " is undefined");
    const size_t bytes = static_cast<size_t>(p.numel()) * dtype_size(p.dtype());
    auto it = open.find(p.dtype());
    if (it == open.end() || (!buckets[it->second].params.empty() && buckets[it->second].bytes() + bytes > cap_bytes)) {
      GradientBucket fresh;
      fresh.dtype = p.dtype();
      buckets.push_back(std::move(fresh));
      open[p.dtype()] = buckets.size() - 1;
      it = open.find(p.dtype());
    }
    GradientBucket& b = buckets[it->second];
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
  }
  return buckets;
}

}  // namespace minidl::parallel
