// CUDA layer normalisation (float32) over the rows of x [rows, D], the formulas of
// kernels/cpu/layer_norm.cpp:
//   forward   mean_r = Σ_j x / D,  var_r = Σ_j (x − mean_r)² / D   (biased; two passes)
//             rstd_r = 1/sqrt(var_r + eps),  y = (x − mean_r)·rstd_r·w + b
//   backward  x̂ = (x − mean_r)·rstd_r,  g = dy·w
//             dx = rstd_r·(g − Σ_j g / D − x̂·Σ_j g·x̂ / D)
//             dw = Σ_r dy·x̂,  db = Σ_r dy
// Strategy:
//   Row kernels (forward, dx). D <= 1024: a warp per row, 8 rows per 256-thread block; lane l
//   keeps elements l, l + 32, ... in registers (kPerLane of them, a power of 2 >= D/32), so the
//   row is read once, reduced with butterfly shuffles (warp_sum: every lane gets the sum) and
//   written from registers. D > 1024: a block per row (256, 512 or 1024 threads as D grows) that
//   strides the row with block_sum, re-reading it (from L1/L2) for the centred squares and the
//   output. Rows are a grid-stride loop over a grid of at most 2³¹ − 1 blocks, so any row count
//   runs. The statistics stay in float: in a fixed tree of at most 32 + 10 levels their relative
//   error is a few dozen ulps of the row's |x| (the CPU accumulates in double).
//   Parameter gradients (dw, db): column sums over the rows, in two levels and without atomics.
//   The rows are cut into chunks of c = max(16, ⌈√rows⌉); pass 1 gives each (chunk, column) a
//   thread that adds the chunk's rows in order into partials [chunks, D] (coalesced: a warp reads
//   32 neighbouring columns of one row); pass 2 adds each column's partials in chunk order. The
//   order depends on the shape alone: the same bits on every run, and about 2·√rows additions
//   deep (the float error of a 65536-row sum is that of ~512 additions, not 65536).
//   All bandwidth-bound: forward reads x once (D <= 1024) and writes y; backward reads x and dy
//   for dx, and again for the partials.
#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kWarpRowsThreads = 256;  // warp-per-row kernels: 8 rows per block
constexpr int kWarpRows = kWarpRowsThreads / kWarpSize;
constexpr int kMaxRowThreads = 1024;   // block-per-row kernels: at most this many threads
constexpr int64_t kWarpMaxCols = 1024;  // rows up to this length take a warp each
constexpr int kColumnThreads = 128;    // parameter-gradient kernels: columns per block
constexpr unsigned kMaxGridY = 65535;

// ---- kernels ----

// One warp per row, D <= 32·kPerLane; lane l holds elements l + 32k (k < kPerLane).
template <int kPerLane>
__global__ void __launch_bounds__(kWarpRowsThreads)
    layer_norm_forward_warp_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                   const float* __restrict__ bias, int64_t rows, int64_t cols, float eps,
                                   float* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpRows;
  const float n = static_cast<float>(cols);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / kWarpSize; r < rows; r += warps) {
    const float* xr = x + r * cols;  // [cols]
    float v[kPerLane];               // this lane's elements, in registers
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t j = lane + k * kWarpSize;
      v[k] = j < cols ? xr[j] : 0.0f;
      sum += v[k];
    }
    const float mu = warp_sum(sum) / n;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const float d = v[k] - mu;
      if (lane + k * kWarpSize < cols) sq += d * d;
    }
    const float rs = 1.0f / sqrtf(warp_sum(sq) / n + eps);
    float* yr = y + r * cols;  // [cols]
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t j = lane + k * kWarpSize;
      if (j < cols) yr[j] = (v[k] - mu) * rs * (weight ? weight[j] : 1.0f) + (bias ? bias[j] : 0.0f);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// One block per row (grid-stride over rows): three strided passes (sum, centred squares, output).
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_forward_block_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                    const float* __restrict__ bias, int64_t rows, int64_t cols, float eps,
                                    float* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd) {
  __shared__ float scratch[kWarpSize];
  const float n = static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;  // [cols]
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += xr[j];
    const float mu = block_sum(sum, scratch) / n;
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float d = xr[j] - mu;
      sq += d * d;
    }
    const float rs = 1.0f / sqrtf(block_sum(sq, scratch) / n + eps);
    float* yr = y + r * cols;  // [cols]
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = (xr[j] - mu) * rs * (weight ? weight[j] : 1.0f) + (bias ? bias[j] : 0.0f);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx, one warp per row: g and x̂ in registers, the two row sums by shuffles, then dx.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpRowsThreads)
    layer_norm_backward_dx_warp_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                       const float* __restrict__ weight, const float* __restrict__ mean,
                                       const float* __restrict__ rstd, int64_t rows, int64_t cols,
                                       float* __restrict__ dx) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpRows;
  const float n = static_cast<float>(cols);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpRows + threadIdx.x / kWarpSize; r < rows; r += warps) {
    const float* xr = x + r * cols;    // [cols]
    const float* gr = dy + r * cols;   // [cols]
    const float mu = mean[r], rs = rstd[r];
    float g[kPerLane], xhat[kPerLane];  // this lane's g = dy·w and x̂, in registers
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t j = lane + k * kWarpSize;
      g[k] = j < cols ? gr[j] * (weight ? weight[j] : 1.0f) : 0.0f;
      xhat[k] = j < cols ? (xr[j] - mu) * rs : 0.0f;
      sum_g += g[k];
      sum_g_xhat += g[k] * xhat[k];
    }
    const float mean_g = warp_sum(sum_g) / n, mean_g_xhat = warp_sum(sum_g_xhat) / n;
    float* dxr = dx + r * cols;  // [cols]
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t j = lane + k * kWarpSize;
      if (j < cols) dxr[j] = rs * (g[k] - mean_g - xhat[k] * mean_g_xhat);
    }
  }
}

// dx, one block per row: a strided pass for the two sums, a second one for dx.
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_backward_dx_block_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                        const float* __restrict__ weight, const float* __restrict__ mean,
                                        const float* __restrict__ rstd, int64_t rows, int64_t cols,
                                        float* __restrict__ dx) {
  __shared__ float scratch[kWarpSize];
  const float n = static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;   // [cols]
    const float* gr = dy + r * cols;  // [cols]
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float g = gr[j] * (weight ? weight[j] : 1.0f);
      sum_g += g;
      sum_g_xhat += g * ((xr[j] - mu) * rs);
    }
    const float mean_g = block_sum(sum_g, scratch) / n;
    const float mean_g_xhat = block_sum(sum_g_xhat, scratch) / n;
    float* dxr = dx + r * cols;  // [cols]
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float g = gr[j] * (weight ? weight[j] : 1.0f);
      dxr[j] = rs * (g - mean_g - ((xr[j] - mu) * rs) * mean_g_xhat);
    }
  }
}

// Pass 1 of dw, db: partial_w[c, j] = Σ_{r in chunk c} dy·x̂, partial_b[c, j] = Σ dy, rows in
// order; a thread per (chunk, column), chunks on gridDim.y (grid-stride past 65535).
__global__ void layer_norm_param_partials_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                                 int64_t rows, int64_t cols, int64_t chunk_rows, int64_t chunks,
                                                 float* __restrict__ partial_w, float* __restrict__ partial_b) {
  for (int64_t c = blockIdx.y; c < chunks; c += gridDim.y) {
    const int64_t r0 = c * chunk_rows;
    const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float acc_w = 0.0f, acc_b = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        const float g = dy[r * cols + j];
        acc_w += g * ((x[r * cols + j] - mean[r]) * rstd[r]);
        acc_b += g;
      }
      if (partial_w) partial_w[c * cols + j] = acc_w;
      if (partial_b) partial_b[c * cols + j] = acc_b;
    }
  }
}

// Pass 2: dweight[j] = Σ_c partial_w[c, j], dbias[j] = Σ_c partial_b[c, j], chunks in order
// (0 when there is no chunk: no rows).
__global__ void layer_norm_param_sums_kernel(const float* __restrict__ partial_w, const float* __restrict__ partial_b,
                                             int64_t chunks, int64_t cols, float* __restrict__ dweight,
                                             float* __restrict__ dbias) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (dweight) {
      float s = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) s += partial_w[c * cols + j];
      dweight[j] = s;
    }
    if (dbias) {
      float s = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) s += partial_b[c * cols + j];
      dbias[j] = s;
    }
  }
}

// ---- helpers of the launchers ----

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* data_or_null(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

unsigned capped_grid(int64_t blocks, int64_t cap) {
  const int64_t g = blocks < cap ? blocks : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

// Threads of a block-per-row kernel for rows of `cols` (> kWarpMaxCols) elements.
int row_block_threads(int64_t cols) { return cols <= 4096 ? 256 : cols <= 16384 ? 512 : kMaxRowThreads; }

// Threads of a column kernel: one warp per 32 columns, at most kColumnThreads.
int column_threads(int64_t cols) {
  return cols >= kColumnThreads ? kColumnThreads : static_cast<int>(ceil_div(cols, kWarpSize) * kWarpSize);
}

// Rows per chunk of the parameter-gradient sums (the file comment): max(16, ⌈√rows⌉).
int64_t param_chunk_rows(int64_t rows) {
  int64_t c = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(rows))));
  while (c * c < rows) ++c;  // exact ⌈√rows⌉ whatever sqrt rounded to
  return c < 16 ? 16 : c;
}

// f(std::integral_constant<int, kPerLane>) for the smallest power of 2 kPerLane with
// 32·kPerLane >= cols (cols <= kWarpMaxCols): the warp kernels' register count per lane.
template <typename F>
void with_per_lane(int64_t cols, F&& f) {
  const int64_t per_lane = ceil_div(cols, kWarpSize);
  if (per_lane <= 1) f(std::integral_constant<int, 1>{});
  else if (per_lane <= 2) f(std::integral_constant<int, 2>{});
  else if (per_lane <= 4) f(std::integral_constant<int, 4>{});
  else if (per_lane <= 8) f(std::integral_constant<int, 8>{});
  else if (per_lane <= 16) f(std::integral_constant<int, 16>{});
  else f(std::integral_constant<int, 32>{});
}

}  // namespace

// ---- launchers ----

void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                                     Tensor& mean, Tensor& rstd) {
  if (HalfStaging::needed({&x, &weight, &bias, &y, &mean, &rstd})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    layer_norm_forward(s.in(x), s.in(weight), s.in(bias), eps, s.out(y), s.out(mean), s.out(rstd));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&x, &weight, &bias, &y, &mean, &rstd}) &&
                         all_contiguous({&x, &weight, &bias, &y, &mean, &rstd}));
  MINIDL_INTERNAL_ASSERT(x.dim() == 2 && y.shape() == x.shape() && mean.numel() == x.shape()[0] &&
                             rstd.numel() == x.shape()[0],
                         "x ", x.shape(), ", y ", y.shape());
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (rows == 0 || cols == 0) return;
  DeviceGuard guard(device_index());
  const float feps = static_cast<float>(eps);
  if (cols <= kWarpMaxCols) {
    const unsigned blocks = capped_grid(ceil_div(rows, kWarpRows), 2147483647);
    with_per_lane(cols, [&](auto per_lane) {
      MINIDL_LAUNCH(layer_norm_forward_warp_kernel<decltype(per_lane)::value>, blocks, kWarpRowsThreads, 0, stream(),
                    x.data<float>(), data_or_null(weight), data_or_null(bias), rows, cols, feps, y.data<float>(),
                    mean.data<float>(), rstd.data<float>());
    });
    return;
  }
  MINIDL_LAUNCH(layer_norm_forward_block_kernel, capped_grid(rows, 2147483647), row_block_threads(cols), 0, stream(),
                x.data<float>(), data_or_null(weight), data_or_null(bias), rows, cols, feps, y.data<float>(),
                mean.data<float>(), rstd.data<float>());
}

void CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  // float32 math (kernels/half_staging.h)
  if (HalfStaging::needed({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias})) {
    HalfStaging s;
    layer_norm_backward(s.in(dy), s.in(x), s.in(weight), s.in(mean), s.in(rstd), s.out(dx), s.out(dweight),
                        s.out(dbias));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias}) &&
                         all_contiguous({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias}));
  MINIDL_INTERNAL_ASSERT(x.dim() == 2 && dy.shape() == x.shape() && x.shape()[1] > 0, "x ", x.shape(), ", dy ",
                         dy.shape());
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  DeviceGuard guard(device_index());
  if (dx.defined() && rows > 0) {
    if (cols <= kWarpMaxCols) {
      const unsigned blocks = capped_grid(ceil_div(rows, kWarpRows), 2147483647);
      with_per_lane(cols, [&](auto per_lane) {
        MINIDL_LAUNCH(layer_norm_backward_dx_warp_kernel<decltype(per_lane)::value>, blocks, kWarpRowsThreads, 0,
                      stream(), dy.data<float>(), x.data<float>(), data_or_null(weight), mean.data<float>(),
                      rstd.data<float>(), rows, cols, dx.data<float>());
      });
    } else {
      MINIDL_LAUNCH(layer_norm_backward_dx_block_kernel, capped_grid(rows, 2147483647), row_block_threads(cols), 0,
                    stream(), dy.data<float>(), x.data<float>(), data_or_null(weight), mean.data<float>(),
                    rstd.data<float>(), rows, cols, dx.data<float>());
    }
  }
  if (!dweight.defined() && !dbias.defined()) return;
  const int64_t chunk_rows = param_chunk_rows(rows);
  const int64_t chunks = ceil_div(rows, chunk_rows);  // 0 when there are no rows
  // [chunks, D] each; none at all without rows (pass 2 then writes zeros without reading them).
  Tensor partial_w = dweight.defined() && chunks > 0 ? empty(Shape{chunks, cols}, dy.options()) : Tensor();
  Tensor partial_b = dbias.defined() && chunks > 0 ? empty(Shape{chunks, cols}, dy.options()) : Tensor();
  const int threads = column_threads(cols);
  const unsigned column_blocks = capped_grid(ceil_div(cols, threads), 65535);
  if (chunks > 0) {
    const dim3 grid(column_blocks, capped_grid(chunks, kMaxGridY));
    MINIDL_LAUNCH(layer_norm_param_partials_kernel, grid, threads, 0, stream(), dy.data<float>(), x.data<float>(),
                  mean.data<float>(), rstd.data<float>(), rows, cols, chunk_rows, chunks, data_or_null(partial_w),
                  data_or_null(partial_b));
  }
  MINIDL_LAUNCH(layer_norm_param_sums_kernel, column_blocks, threads, 0, stream(), data_or_null(partial_w),
                data_or_null(partial_b), chunks, cols, data_or_null(dweight), data_or_null(dbias));
}

}  // namespace minidl::cuda
