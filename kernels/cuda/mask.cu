// Masking kernels of the CUDA backend, float32, elementwise (the CPU's kernels/cpu/mask.cpp):
//
// Math:   triangle:    y[i, r, c] = x[i, r, c] if c − r <= diagonal (tril) or c − r >= diagonal
//                      (triu), else 0
//         masked_fill: y[j] = mask[j] != 0 ? value : x[j]
// Shapes: triangle over contiguous x, y [batch, R, C]; masked_fill over contiguous x, mask, y of
//         one shape (the op layer expanded the mask to x's shape in x's dtype).
// Strategy: one grid-stride loop over the elements, consecutive threads on consecutive
//         elements (coalesced); triangle recovers (r, c) of element j from j's position in its
//         [R, C] matrix. Memory-bound: one read and one write per element (two reads for masked_fill).
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

// ---- kernels ----

template <bool kUpper>
__global__ void triangle_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t rows,
                                int64_t cols, int64_t diagonal) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % cols, r = (i / cols) % rows;
    const bool keep = kUpper ? c - r >= diagonal : c - r <= diagonal;
    y[i] = keep ? x[i] : 0.0f;
  }
}

__global__ void masked_fill_kernel(const float* __restrict__ x, const float* __restrict__ mask, float value,
                                   float* __restrict__ y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = mask[i] != 0.0f ? value : x[i];
}

}  // namespace

// ---- launchers ----

void CudaBackend::triangle(const Tensor& x, Tensor& y, int64_t diagonal, bool upper) {
  MINIDL_INTERNAL_ASSERT(all_float32({&x, &y}) && all_contiguous({&x, &y}) && x.dim() == 3 && x.shape() == y.shape());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const unsigned grid = grid_for(n, kThreads, multiprocessor_count());
  const int64_t rows = x.shape()[1], cols = x.shape()[2];
  if (upper) {
    MINIDL_LAUNCH(triangle_kernel<true>, grid, kThreads, 0, stream(), x.data<float>(), y.data<float>(), n, rows, cols,
                  diagonal);
  } else {
    MINIDL_LAUNCH(triangle_kernel<false>, grid, kThreads, 0, stream(), x.data<float>(), y.data<float>(), n, rows, cols,
                  diagonal);
  }
}

void CudaBackend::masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& y) {
  MINIDL_INTERNAL_ASSERT(all_float32({&x, &mask, &y}) && all_contiguous({&x, &mask, &y}) && x.shape() == mask.shape() &&
                         x.shape() == y.shape());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const unsigned grid = grid_for(n, kThreads, multiprocessor_count());
  MINIDL_LAUNCH(masked_fill_kernel, grid, kThreads, 0, stream(), x.data<float>(), mask.data<float>(),
                static_cast<float>(value), y.data<float>(), n);
}

}  // namespace minidl::cuda
