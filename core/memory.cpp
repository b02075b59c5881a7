// The public memory calls of core/memory.h, forwarded to the device's backend.
#include "core/memory.h"

#include <cstring>

#include "core/error.h"

namespace minidl {

MemoryStats memory_stats(Device device) { return backend_for(device).memory_stats(); }
void empty_cache(Device device) { backend_for(device).empty_cache(); }
void reset_peak_memory_stats(Device device) { backend_for(device).reset_peak_memory_stats(); }

bool is_pinned(const Tensor& x) {
  const Allocator* pinned = cuda_pinned_host_allocator();
  return x.defined() && x.device().is_cpu() && pinned != nullptr && x.impl()->storage.allocator() == pinned;
}

Tensor pin_memory(const Tensor& x) {
  check_defined(x, "pin_memory", "self");
  MINIDL_CHECK(x.device().is_cpu(), "pin_memory: expected a CPU tensor, got one on ", x.device());
  Allocator* pinned = cuda_pinned_host_allocator();
  MINIDL_CHECK(pinned != nullptr && cuda_is_available(),
               "pin_memory: pinned host memory needs CUDA (this build or machine has no usable GPU)");
  if (is_pinned(x)) return x;
  const Tensor src = x.contiguous();
  auto impl = std::make_shared<TensorImpl>();
  const size_t bytes = static_cast<size_t>(src.numel()) * dtype_size(src.dtype());
  impl->storage = Storage(bytes, Device::cpu(), *pinned);
  impl->shape = src.shape();
  impl->strides = contiguous_strides(src.shape());
  impl->dtype = src.dtype();
  Tensor out(std::move(impl));
  if (src.numel() > 0) std::memcpy(out.raw_data(), src.raw_data(), bytes);
  return out;
}

}  // namespace minidl
