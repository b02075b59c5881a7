// Masking kernels of the CUDA backend, float32, elementwise (the CPU's kernels/cpu/mask.cpp):
//
// Math:   triangle:    y[i, r, c] = x[i, r, c] if c − r <= diagonal (tril) or c − r >= diagonal
//                      (triu), else 0
//         masked_fill: y[j] = mask[j] != 0 ? value : x[j]
// Shapes: triangle over contiguous x, y [batch, R, C]; masked_fill over contiguous x, y and a
//         mask of their shape in x's dtype, contiguous or a broadcast view (stride 0 along the
//         dims it repeats over, such as a causal [T, T] mask over [B, H, T, T]).
// Strategy: one grid-stride loop over the elements, consecutive threads on consecutive
//         elements (coalesced); triangle recovers (r, c) of element j from j's position in its
//         [R, C] matrix. A broadcast mask is read through its strides: the host drops size-1
//         dims and merges dims the mask steps through as one (the causal mask becomes [B·H, T·T]
//         with strides (0, 1)), and each thread unravels its index over those few dims, in
//         32-bit arithmetic when every index fits (integer division is much cheaper). The mask's
//         repeated reads hit the cache. Memory-bound: one read and one write per element (two
//         reads for masked_fill).
#include "core/error.h"
#include "kernels/half_staging.h"
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

// A broadcast mask's dims after collapse_mask_dims: element i of x (contiguous over `size`)
// reads the mask at Σ index_d · stride[d]. Passed by value.
struct MaskGeometry {
  int rank = 0;
  int64_t size[Shape::kMaxRank] = {};
  int64_t stride[Shape::kMaxRank] = {};
};

template <typename Index>
__global__ void masked_fill_strided_kernel(const float* __restrict__ x, const float* __restrict__ mask,
                                           MaskGeometry geo, float value, float* __restrict__ y, int64_t n) {
  const Index step = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < static_cast<Index>(n); i += step) {
    Index rest = i, offset = 0;
#pragma unroll
    for (int d = Shape::kMaxRank - 1; d >= 1; --d) {
      if (d < geo.rank) {
        const Index size = static_cast<Index>(geo.size[d]);
        offset += (rest % size) * static_cast<Index>(geo.stride[d]);
        rest /= size;
      }
    }
    offset += rest * static_cast<Index>(geo.stride[0]);
    y[i] = mask[offset] != 0.0f ? value : x[i];
  }
}

// ---- host helpers ----

// Drops size-1 dims and merges dim d into the kept dim before it when the mask steps through
// both as one (stride[prev] == stride[d] · size[d]; broadcast runs of stride 0 merge too). x and
// y are contiguous, so the row-major order of the index is unchanged.
MaskGeometry collapse_mask_dims(const Shape& shape, const Shape& strides) {
  MaskGeometry g;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (g.rank > 0 && g.stride[g.rank - 1] == strides[d] * shape[d]) {
      g.size[g.rank - 1] *= shape[d];
      g.stride[g.rank - 1] = strides[d];
      continue;
    }
    g.size[g.rank] = shape[d];
    g.stride[g.rank] = strides[d];
    ++g.rank;
  }
  if (g.rank == 0) {  // a single element
    g.rank = 1;
    g.size[0] = 1;
  }
  return g;
}

// Whether every index, and every offset into the mask, fits in int32 with headroom for i + step.
bool fits_int32(const MaskGeometry& g, int64_t n) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (n >= kLimit) return false;
  int64_t max_offset = 0;
  for (int d = 0; d < g.rank; ++d) {
    if (g.stride[d] < 0) return false;
    max_offset += (g.size[d] - 1) * g.stride[d];
  }
  return max_offset < kLimit;
}

}  // namespace

// ---- launchers ----

void CudaBackend::triangle(const Tensor& x, Tensor& y, int64_t diagonal, bool upper) {
  if (HalfStaging::needed({&x, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    triangle(s.in(x), s.out(y), diagonal, upper);
    return s.commit();
  }
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
  if (HalfStaging::needed({&x, &mask, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    masked_fill(s.in(x), s.in(mask), value, s.out(y));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&x, &mask, &y}) && all_contiguous({&x, &y}) && x.shape() == mask.shape() &&
                         x.shape() == y.shape());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const unsigned grid = grid_for(n, kThreads, multiprocessor_count());
  const float* px = x.data<float>();
  const float* pm = mask.data<float>();
  float* py = y.data<float>();
  const float fill = static_cast<float>(value);
  if (mask.is_contiguous()) {
    MINIDL_LAUNCH(masked_fill_kernel, grid, kThreads, 0, stream(), px, pm, fill, py, n);
    return;
  }
  const MaskGeometry geo = collapse_mask_dims(x.shape(), mask.strides());
  if (fits_int32(geo, n)) {
    MINIDL_LAUNCH(masked_fill_strided_kernel<int32_t>, grid, kThreads, 0, stream(), px, pm, geo, fill, py, n);
  } else {
    MINIDL_LAUNCH(masked_fill_strided_kernel<int64_t>, grid, kThreads, 0, stream(), px, pm, geo, fill, py, n);
  }
}

}  // namespace minidl::cuda
