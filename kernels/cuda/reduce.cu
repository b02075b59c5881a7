// Reductions of the CUDA backend (float32), deterministic: no atomics, and every sum is added
// in an order fixed by the shape and the device (same input, same device -> same bits).
//   sum_dim:     x contiguous, viewed as [outer, n, inner]; out[o, i] = Σ_j x[o, j, i].
//   argmax_rows: x [rows, cols] contiguous; out[r] = index (int64) of the first maximum of row
//                r, with the CPU's NaN rule: the CPU keeps `best` and moves it only when
//                x[c] > x[best], so a NaN at column 0 wins (nothing compares greater) and any
//                other NaN is never picked. Hence: 0 if x[r, 0] is NaN, else the first index
//                of the maximum over the non-NaN values.
// Strategy, by shape:
//   inner == 1 (row sums, the last dim): a warp per row when n <= 1024 (8 rows per block, lanes
//     stride the row, then a butterfly warp_sum); a 256-thread block per row beyond (float4
//     loads when the rows are 16-byte aligned, then block_sum).
//   inner > 1 (column-like sums): a block of [TY, TX] threads takes TX adjacent columns of one
//     outer index (TX = min(32, inner) rounded to a power of 2, coalesced along inner); its TY
//     thread rows split n in a fixed interleave and meet in a shared-memory tree over TY.
//   Long n with few outputs (few blocks for the device): two passes in fixed order. Pass 1
//     gives each of `splits` blocks a contiguous chunk of n and writes partial sums to a scratch
//     tensor ([outer, splits] for rows, [splits, outer * inner] for columns); pass 2 sums the
//     partials with the same kernels, unsplit. No block ever waits on another.
//   argmax: the same warp-per-row / block-per-row split; each thread scans its columns in
//     increasing order, then (value, index) pairs merge by "larger value, else smaller index".
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;                 // every kernel here: 256 threads per block
constexpr int kRowsPerWarpBlock = kThreads / kWarpSize;
constexpr int64_t kWarpRowMax = 1024;         // longest row a single warp reduces
constexpr int64_t kMinSplitElements = 16384;  // a split of a row-sum keeps at least this many
constexpr int64_t kMinSplitRows = 64;         // a split of a column-sum keeps at least this many rows
constexpr int kMaxSplits = 1024;              // so pass 2 of a row-sum is one warp per row
constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

// ---- kernels ----

// out[r] = Σ_j x[r, j], x [rows, n] (n <= kWarpRowMax), one warp per row.
__global__ void __launch_bounds__(kThreads) row_sum_warp_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                                int64_t rows, int64_t n) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerWarpBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / kWarpSize; r < rows;
       r += warps) {
    const float* row = x + r * n;  // [n]
    float acc = 0.0f;
    for (int64_t j = lane; j < n; j += kWarpSize) acc += row[j];
    acc = warp_sum(acc);
    if (lane == 0) out[r] = acc;
  }
}

// Block (blockIdx.x = row r, blockIdx.y = split s) sums x[r, s*chunk : min(n, (s+1)*chunk)] into
// out[r * gridDim.y + s] ([rows] when unsplit, the partials [rows, splits] otherwise).
// kVec: x 16-byte aligned, n and chunk multiples of 4, so every chunk starts aligned.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) row_sum_block_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                                 int64_t n, int64_t chunk) {
  __shared__ float scratch[kWarpSize];
  const int64_t r = blockIdx.x;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
  const float* row = x + r * n;  // [n]
  float acc = 0.0f;
  if constexpr (kVec) {
    const float4* v = reinterpret_cast<const float4*>(row + j0);  // [(j1 - j0) / 4] float4
    const int64_t nv = (j1 - j0) / 4;
#pragma unroll 4
    for (int64_t k = threadIdx.x; k < nv; k += blockDim.x) {
      const float4 q = v[k];
      acc += q.x;
      acc += q.y;
      acc += q.z;
      acc += q.w;
    }
  } else {
#pragma unroll 4
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) acc += row[j];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[r * gridDim.y + blockIdx.y] = acc;
}

// Column sums. Block [TY, TX] (blockDim.y = TY, blockDim.x = TX, TX * TY = 256, both powers
// of 2); blockIdx.x walks tiles (o, TX columns), blockIdx.y = split s over rows
// [s*chunk, min(n, (s+1)*chunk)). Thread (ty, tx) adds rows j0+ty, j0+ty+TY, ... of column i,
// then the TY partial sums of a column meet in a fixed tree. Writes out[(s*outer + o)*inner + i].
__global__ void __launch_bounds__(kThreads) col_sum_kernel(const float* __restrict__ x, float* __restrict__ out,
                                                           int64_t outer, int64_t n, int64_t inner, int64_t chunk) {
  __shared__ float partial[kThreads];  // [TY, TX]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tile_x = blockDim.x, tile_y = blockDim.y;
  const int64_t tiles_per_outer = (inner + tile_x - 1) / tile_x;
  const int64_t tiles = outer * tiles_per_outer;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t o = t / tiles_per_outer;
    const int64_t i = (t % tiles_per_outer) * tile_x + tx;
    float acc = 0.0f;
    if (i < inner) {
      const float* col = x + o * n * inner + i;  // column i of x[o]: stride inner
#pragma unroll 4
      for (int64_t j = j0 + ty; j < j1; j += tile_y) acc += col[j * inner];
    }
    partial[ty * tile_x + tx] = acc;
    __syncthreads();
    for (int h = tile_y / 2; h > 0; h /= 2) {
      if (ty < h) partial[ty * tile_x + tx] += partial[(ty + h) * tile_x + tx];
      __syncthreads();
    }
    if (ty == 0 && i < inner) out[(static_cast<int64_t>(blockIdx.y) * outer + o) * inner + i] = partial[tx];
    __syncthreads();  // partial is rewritten by the next tile
  }
}

// Keeps the better of (bv, bi) and (v, i): a larger value, or the smaller index on a tie;
// i == kNoIndex means "no candidate" (a thread that saw only NaN or no column).
__device__ inline void argmax_merge(float& bv, int64_t& bi, float v, int64_t i) {
  if (i == kNoIndex) return;
  if (bi == kNoIndex || v > bv || (v == bv && i < bi)) {
    bv = v;
    bi = i;
  }
}

__device__ inline void warp_argmax(float& bv, int64_t& bi) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, offset);
    const int64_t i = __shfl_xor_sync(0xffffffffu, bi, offset);
    argmax_merge(bv, bi, v, i);  // symmetric, so both partners agree
  }
}

// This thread's candidate over columns c = first, first + step, ... of row (NaN skipped).
__device__ inline void scan_argmax(const float* row, int64_t cols, int64_t first, int64_t step, float& bv,
                                   int64_t& bi) {
  for (int64_t c = first; c < cols; c += step) {
    const float v = row[c];
    if (v == v) argmax_merge(bv, bi, v, c);  // increasing c: a tie never replaces
  }
}

__device__ inline int64_t argmax_result(const float* row, int64_t bi) {
  const float first = row[0];
  if (first != first) return 0;  // the CPU's rule: a NaN at column 0 is never beaten
  return bi == kNoIndex ? 0 : bi;
}

__global__ void __launch_bounds__(kThreads) argmax_warp_kernel(const float* __restrict__ x, int64_t* __restrict__ out,
                                                               int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerWarpBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / kWarpSize; r < rows;
       r += warps) {
    const float* row = x + r * cols;  // [cols]
    float bv = -INFINITY;
    int64_t bi = kNoIndex;
    scan_argmax(row, cols, lane, kWarpSize, bv, bi);
    warp_argmax(bv, bi);
    if (lane == 0) out[r] = argmax_result(row, bi);
  }
}

__global__ void __launch_bounds__(kThreads) argmax_block_kernel(const float* __restrict__ x, int64_t* __restrict__ out,
                                                                int64_t cols) {
  __shared__ float values[kWarpSize];
  __shared__ int64_t indices[kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t r = blockIdx.x;
  const float* row = x + r * cols;  // [cols]
  float bv = -INFINITY;
  int64_t bi = kNoIndex;
  scan_argmax(row, cols, threadIdx.x, blockDim.x, bv, bi);
  warp_argmax(bv, bi);
  if (lane == 0) {
    values[warp] = bv;
    indices[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / kWarpSize;
    bv = lane < warps ? values[lane] : -INFINITY;
    bi = lane < warps ? indices[lane] : kNoIndex;
    warp_argmax(bv, bi);
    if (lane == 0) out[r] = argmax_result(row, bi);
  }
}

// ---- host helpers ----

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Blocks that fill the device for a memory-bound sum: 8 blocks of 256 threads per
// multiprocessor (full occupancy); fewer outputs than that is when splitting n pays.
int64_t busy_blocks(const CudaBackend& be) {
  return 8 * static_cast<int64_t>(be.multiprocessor_count() > 0 ? be.multiprocessor_count() : 1);
}

void row_sums_warp(const CudaBackend& be, const float* x, float* out, int64_t rows, int64_t n) {
  const int64_t blocks = min64(ceil_div(rows, kRowsPerWarpBlock), std::numeric_limits<int32_t>::max());
  MINIDL_LAUNCH(row_sum_warp_kernel, static_cast<unsigned>(blocks), kThreads, 0, be.stream(), x, out, rows, n);
}

// One block per (row, split): out gets [rows, splits] (just [rows] when splits == 1).
void row_sums_block(const CudaBackend& be, const float* x, float* out, int64_t rows, int64_t n, int64_t chunk,
                    int64_t splits) {
  MINIDL_CHECK(rows <= std::numeric_limits<int32_t>::max(), "sum_dim: ", rows, " rows of ", n,
               " exceed the CUDA grid");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(splits));
  if (aligned16(x) && n % 4 == 0 && chunk % 4 == 0) {
    MINIDL_LAUNCH(row_sum_block_kernel<true>, grid, kThreads, 0, be.stream(), x, out, n, chunk);
  } else {
    MINIDL_LAUNCH(row_sum_block_kernel<false>, grid, kThreads, 0, be.stream(), x, out, n, chunk);
  }
}

void col_sums(const CudaBackend& be, const float* x, float* out, int64_t outer, int64_t n, int64_t inner,
              int64_t chunk, int64_t splits) {
  int tile_x = 2;
  while (tile_x < 32 && tile_x < inner) tile_x *= 2;
  const dim3 block(static_cast<unsigned>(tile_x), static_cast<unsigned>(kThreads / tile_x));
  const int64_t tiles = outer * ceil_div(inner, tile_x);
  const dim3 grid(static_cast<unsigned>(min64(tiles, std::numeric_limits<int32_t>::max())),
                  static_cast<unsigned>(splits));
  MINIDL_LAUNCH(col_sum_kernel, grid, block, 0, be.stream(), x, out, outer, n, inner, chunk);
}

// How to cut n into splits: at most `wanted` chunks of at least `min_chunk`, chunk a multiple
// of 4 (keeps float4 alignment). Every split is non-empty.
void plan_splits(int64_t n, int64_t wanted, int64_t min_chunk, int64_t& chunk, int64_t& splits) {
  splits = min64(min64(wanted, n / min_chunk), kMaxSplits);
  if (splits <= 1) {
    chunk = n;
    splits = 1;
    return;
  }
  chunk = ceil_div(ceil_div(n, splits), 4) * 4;
  splits = ceil_div(n, chunk);
}

}  // namespace

// ---- launchers ----

void CudaBackend::sum_dim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  if (HalfStaging::needed({&x, &out})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    sum_dim(s.in(x), outer, n, inner, s.out(out));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&x, &out}) && all_contiguous({&x, &out}));
  MINIDL_INTERNAL_ASSERT(outer * n * inner == x.numel() && outer * inner == out.numel(), "x ", x.shape(),
                         " viewed as [", outer, ", ", n, ", ", inner, "], out ", out.shape());
  DeviceGuard guard(device_index());
  if (out.numel() == 0) return;
  float* po = out.data<float>();
  if (n == 0) {  // an empty sum is 0 (all-zero bytes are +0.0f)
    MINIDL_CUDA_CHECK(cudaMemsetAsync(po, 0, static_cast<size_t>(out.numel()) * sizeof(float), stream()));
    return;
  }
  const float* px = x.data<float>();
  const int64_t target = busy_blocks(*this);

  if (inner == 1) {
    if (n <= kWarpRowMax) {
      row_sums_warp(*this, px, po, outer, n);
      return;
    }
    int64_t chunk = n, splits = 1;
    if (outer < target) plan_splits(n, ceil_div(target, outer), kMinSplitElements, chunk, splits);
    if (splits == 1) {
      row_sums_block(*this, px, po, outer, n, n, 1);
      return;
    }
    Tensor partial = empty(Shape{outer, splits}, TensorOptions(DType::Float32, device()));  // [outer, splits]
    row_sums_block(*this, px, partial.data<float>(), outer, n, chunk, splits);
    row_sums_warp(*this, partial.data<float>(), po, outer, splits);  // splits <= kMaxSplits
    return;
  }

  int tile_x = 2;
  while (tile_x < 32 && tile_x < inner) tile_x *= 2;
  const int64_t blocks = outer * ceil_div(inner, tile_x);
  int64_t chunk = n, splits = 1;
  if (blocks < target) plan_splits(n, ceil_div(target, blocks), kMinSplitRows, chunk, splits);
  if (splits == 1) {
    col_sums(*this, px, po, outer, n, inner, n, 1);
    return;
  }
  // [splits, outer * inner]
  Tensor partial = empty(Shape{splits, outer * inner}, TensorOptions(DType::Float32, device()));
  col_sums(*this, px, partial.data<float>(), outer, n, inner, chunk, splits);
  // Pass 2: the partials summed over splits, as one column-sum of [1, splits, outer * inner].
  col_sums(*this, partial.data<float>(), po, 1, splits, outer * inner, splits, 1);
}

void CudaBackend::argmax_rows(const Tensor& x, Tensor& out) {
  if (HalfStaging::needed({&x})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    argmax_rows(s.in(x), out);
    return;
  }
  MINIDL_INTERNAL_ASSERT(x.dtype() == DType::Float32 && out.dtype() == DType::Int64 && all_contiguous({&x, &out}));
  MINIDL_INTERNAL_ASSERT(x.dim() == 2 && out.numel() == x.shape()[0] && x.shape()[1] > 0, "x ", x.shape(), ", out ",
                         out.shape());
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (rows == 0) return;
  DeviceGuard guard(device_index());
  if (cols <= kWarpRowMax) {
    const int64_t blocks = min64(ceil_div(rows, kRowsPerWarpBlock), std::numeric_limits<int32_t>::max());
    MINIDL_LAUNCH(argmax_warp_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream(), x.data<float>(),
                  out.data<int64_t>(), rows, cols);
  } else {
    MINIDL_CHECK(rows <= std::numeric_limits<int32_t>::max(), "argmax: ", rows, " rows exceed the CUDA grid");
    MINIDL_LAUNCH(argmax_block_kernel, static_cast<unsigned>(rows), kThreads, 0, stream(), x.data<float>(),
                  out.data<int64_t>(), cols);
  }
}

}  // namespace minidl::cuda
