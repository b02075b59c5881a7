// Launch arithmetic shared by the kernel files: ceil-div, grid sizes for grid-stride loops,
// and the warp/block reductions the row kernels use. Include only from .cu files (kernels/cuda
// names a header .cuh when it holds device code, .h when it is plain C++).
#pragma once

#include <cstdint>

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

#if defined(__CUDACC__)
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
