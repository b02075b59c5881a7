// The CUDA entry points of core/backend.h for a build without CUDA (MINIDL_CUDA=OFF or no
// nvcc): no devices, and no backend — so a cuda:N tensor is a clear error, never a silent
// CPU fallback.
#include "core/backend.h"

namespace minidl {

Backend* cuda_backend(int) { return nullptr; }
int cuda_backend_device_count() { return 0; }
std::string cuda_backend_device_name(int) { return {}; }
Allocator* cuda_pinned_host_allocator() { return nullptr; }

}  // namespace minidl
