// The simulated device's kernel launch: what `kernel<<<grid, block, shared, stream>>>(args)` is
// under nvcc. The arguments are copied into the launch (as the GPU copies them into constant
// memory), the configuration is checked at once with the CUDA error the real runtime returns,
// and the grid is queued on the stream; it runs later on that stream's host thread.
#pragma once

#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cudasim/vector_types.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace cudasim {

struct LaunchSpec {
  const void* kernel = nullptr;          // identifies the kernel (cudaFuncSetAttribute's key)
  dim3 grid, block;
  size_t shared_bytes = 0;               // dynamic shared memory
  cudaStream_t stream = nullptr;
  std::function<void()> body;            // one simulated thread: the kernel called with the arguments
  std::vector<const void*> pointer_args; // every pointer argument, checked to be device memory
  const char* file = nullptr;            // where it was launched, for messages
  int line = 0;
};

// Checks the configuration, sets the calling thread's last error (cudaGetLastError) and, when
// it is valid, queues the grid.
void launch(LaunchSpec&& spec);

template <class T>
inline void collect_pointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>)
    out.push_back(static_cast<const void*>(v));
}

}  // namespace cudasim

// The arguments are converted to the kernel's parameter types by the caller (launch_kernel).
template <class... Params>
void cudasim_launch_at(const char* file, int line, void (*kernel)(Params...), dim3 grid, dim3 block,
                       size_t shared_bytes, cudaStream_t stream, std::type_identity_t<std::decay_t<Params>>... args) {
  cudasim::LaunchSpec spec;
  spec.kernel = reinterpret_cast<const void*>(kernel);
  spec.grid = grid;
  spec.block = block;
  spec.shared_bytes = shared_bytes;
  spec.stream = stream;
  spec.file = file;
  spec.line = line;
  (cudasim::collect_pointer(spec.pointer_args, args), ...);
  spec.body = [kernel, tuple = std::tuple<std::decay_t<Params>...>(std::move(args)...)]() { std::apply(kernel, tuple); };
  cudasim::launch(std::move(spec));
}

template <class... Params>
void cudasim_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                    std::type_identity_t<std::decay_t<Params>>... args) {
  cudasim_launch_at(nullptr, 0, kernel, grid, block, shared_bytes, stream, std::move(args)...);
}
