// Launching shared by the kernel files: MINIDL_LAUNCH, the one way a kernel is launched in
// kernels/cuda; ceil-div and grid sizes for grid-stride loops; and the warp/block reductions
// the row kernels use. Include only from .cu files (kernels/cuda names a header .cuh when it
// holds device code, .h when it is plain C++).
//
// MINIDL_LAUNCH(kernel, grid, block, shared_bytes, stream, args...) launches and then checks the
// launch (check_launch, kernels/cuda/cuda_check.h). The sources go through it rather than
// writing <<<...>>> because they are compiled twice: by nvcc, and by the host compiler against a
// simulated CUDA runtime (MINIDL_CUDA_SIM defined, __CUDACC__ not), where <<<...>>> does not
// exist and cudasim_launch, from the simulator's cuda_runtime.h, runs the kernel instead. A
// test (tests/kernels/test_cuda_launch_checks.cpp) fails on any <<< in kernels/cuda outside
// launch_kernel below. A template kernel is named with all its template arguments
// (map_kernel<kInputs, F>): the helper takes a function pointer, so nothing is deduced from
// the call arguments, which convert to the kernel's parameter types as in a plain call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/profiler.h"
#include "kernels/cuda/cuda_check.h"

namespace minidl::cuda {

constexpr int kWarpSize = 32;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over n items with `per_block` items per block pass: enough to
// fill the device (a few waves of blocks per multiprocessor), never more than the work needs.
inline unsigned grid_for(int64_t n, int per_block, int sm_count, int blocks_per_sm = 8) {
  const int64_t needed = ceil_div(n, per_block);
  const int64_t cap = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * blocks_per_sm;
  const int64_t g = needed < cap ? needed : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

// Kernel launch: <<<...>>> under nvcc, the simulated device's launcher otherwise; then the same
// launch check on both. `args` are not deduced (type_identity_t): each converts implicitly to
// its kernel parameter at the call site, exactly as in kernel<<<...>>>(args...) — no casts.
// Each launch is counted by the profiler (core/profiler.h) while it records.
template <class... Params>
void launch_kernel(const char* file, int line, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                   cudaStream_t stream, std::type_identity_t<Params>... args) {
#if defined(__CUDACC__)
  kernel<<<grid, block, shared_bytes, stream>>>(args...);
#else
  ::cudasim_launch_at(file, line, kernel, grid, block, shared_bytes, stream, args...);
#endif
  check_launch(file, line);
  if (profiler::active()) profiler::note_launch();
}

#define MINIDL_LAUNCH(...) ::minidl::cuda::launch_kernel(__FILE__, __LINE__, __VA_ARGS__)

#if defined(__CUDACC__) || defined(MINIDL_CUDA_SIM)
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` is 32 floats of shared memory. The order is fixed, so results repeat.
__device__ inline float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
#endif

}  // namespace minidl::cuda
