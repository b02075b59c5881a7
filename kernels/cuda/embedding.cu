// CUDA embedding (float32 weight [V, D], int64 indices [N]), the formulas of
// kernels/cpu/embedding.cpp:
//   forward   out[i, :] = weight[idx[i], :]                                     out [N, D]
//   backward  dweight[v, :] = Σ_{i : idx[i] = v} dy[i, :], added in increasing i  dweight [V, D]
// Forward strategy: a 2-D grid-stride gather, positions on gridDim.y (capped at 65535), columns
// on x; warps read and write whole rows (coalesced). An index outside [0, V) — only possible
// while its error is deferred (Note [deferred target errors], cross_entropy.cu) — writes NaN.
//
// Backward strategy. Many positions name the same row (a GPT batch repeats common tokens), and
// float atomicAdds would add each row's contributions in whatever order threads happen to run:
// dweight's last bits would change between runs. Instead the positions are sorted by index, and
// each row of dweight is summed by its own threads in position order — the CPU's order, so the
// two backends give the same bits:
//   1. keys[i] = (idx[i] << 32) | i: the index in the high word, the position in the low one.
//      A position whose index lies outside [0, V) gets high word 0xFFFFFFFF, past every real
//      index, so no row sums it. Keys are padded to P = 2^⌈log2 N⌉ with all-ones keys.
//   2. A bitonic sort of the P keys. The keys are distinct, so the sorted order is unique:
//      index-major, position-minor, which is what a stable sort of the positions by index gives;
//      the network compares fixed pairs, so nothing depends on scheduling and no atomics are
//      needed. Steps whose compare distance is below kSortTile = 2048 run in shared memory, a
//      tile of 2048 keys per block of 1024 threads: one launch sorts every tile, and one per
//      later merge stage finishes it; each longer step is one global launch. For N = 65536
//      (P = 2^16): 6 tile launches and 15 global ones, each moving 512 KiB.
//   3. starts[v] = the first sorted slot whose index is >= v, for v in [0, V]: one binary
//      search per index (V + 1 searches of log2 N steps).
//   4. dweight[v, j] = Σ over slots [starts[v], starts[v + 1]) of dy[position, j]: a thread per
//      (v, column), indices on gridDim.y (grid-stride past 65535), up to 128 columns per block,
//      so reads of dy rows are coalesced and every row of dweight is written once (0 for an
//      index no position names: no separate fill).
// Cost for N = 65536, V = 50304, D = 768: the sort is ~21 small launches; step 4 reads dy once
// (N·D floats) and writes dweight once (V·D floats), as an atomicAdd scatter would plus the
// fill it needs. Limit: a row's positions are added one after another by each of its column
// threads, so an index that fills most of the batch (a padding token at every position) costs
// ~N dependent additions per column — correct and deterministic, but serial.
// Keys hold N <= 2³¹ − 1 positions and V < 2³² − 1 rows; the launcher checks both.
#include <cstdint>

#include "core/error.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 128;  // backward rows kernel: columns per block
constexpr int kSortTile = 2048;      // keys per shared-memory tile of the bitonic sort
constexpr unsigned kMaxGridY = 65535;
constexpr uint64_t kOutOfRange = 0xFFFFFFFFull;  // the high word of a key whose index is out of range

// ---- kernels ----

// out [n, D] = weight rows; NaN for an index outside [0, V).
__global__ void embedding_forward_kernel(const int64_t* __restrict__ indices, const float* __restrict__ weight,
                                         int64_t n, int64_t V, int64_t D, float* __restrict__ out) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t v = indices[i];
    const bool valid = v >= 0 && v < V;
    const float* from = weight + (valid ? v : 0) * D;  // [D]
    float* to = out + i * D;                           // [D]
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < D;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      to[j] = valid ? from[j] : __int_as_float(0x7fc00000);
  }
}

// keys [padded]: (index << 32) | position for the n positions, all ones after them.
__global__ void embedding_sort_keys_kernel(const int64_t* __restrict__ indices, int64_t n, int64_t V, int64_t padded,
                                           uint64_t* __restrict__ keys) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < padded;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < n) {
      const int64_t v = indices[i];
      const uint64_t high = v >= 0 && v < V ? static_cast<uint64_t>(v) : kOutOfRange;
      keys[i] = (high << 32) | static_cast<uint64_t>(i);
    } else {
      keys[i] = ~0ull;
    }
  }
}

// The bitonic compare-exchange: puts a pair in ascending (or descending) order.
__device__ inline void order_pair(uint64_t& a, uint64_t& b, bool ascending) {
  if ((a > b) == ascending) {
    const uint64_t t = a;
    a = b;
    b = t;
  }
}

// One block per tile of `tile` keys (tile = blockDim.x · 2, a power of 2 <= kSortTile) in shared
// memory: for each stage k = k_first, 2·k_first, ..., k_last, the steps j = min(k, tile)/2, ..., 1.
// Thread t orders pair t of the step: i = (t / j)·2j + t % j and i + j, ascending where bit k of
// the global position of i is 0. (k_first = 2, k_last = tile sorts each tile, alternately up and
// down; k_first = k_last = k > tile finishes merge stage k after its global steps.)
__global__ void __launch_bounds__(kSortTile / 2)
    bitonic_sort_tile_kernel(uint64_t* __restrict__ keys, int64_t k_first, int64_t k_last) {
  __shared__ uint64_t tile_keys[kSortTile];  // the block's tile
  const int half = static_cast<int>(blockDim.x), tile = 2 * half, t = static_cast<int>(threadIdx.x);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  tile_keys[t] = keys[base + t];
  tile_keys[t + half] = keys[base + t + half];
  __syncthreads();
  for (int64_t k = k_first; k <= k_last; k *= 2) {
    for (int j = static_cast<int>((k < tile ? k : tile) / 2); j > 0; j /= 2) {
      const int i = (t / j) * 2 * j + t % j;
      order_pair(tile_keys[i], tile_keys[i + j], ((base + i) & k) == 0);
      __syncthreads();
    }
  }
  keys[base + t] = tile_keys[t];
  keys[base + t + half] = tile_keys[t + half];
}

// One step (k, j) of the bitonic network over all padded keys, j >= kSortTile: pair t of
// padded/2 orders i = (t / j)·2j + t % j and i + j.
__global__ void bitonic_sort_step_kernel(uint64_t* __restrict__ keys, int64_t pairs, int64_t k, int64_t j) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < pairs;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = (t / j) * 2 * j + t % j;
    order_pair(keys[i], keys[i + j], (i & k) == 0);
  }
}

// starts[v] for v in [0, V]: the first of the n sorted keys whose index is >= v.
__global__ void embedding_row_starts_kernel(const uint64_t* __restrict__ keys, int64_t n, int64_t V,
                                            int64_t* __restrict__ starts) {
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v <= V;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t first_key = static_cast<uint64_t>(v) << 32;
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < first_key) lo = mid + 1;
      else hi = mid;
    }
    starts[v] = lo;
  }
}

// dweight[v, j] = Σ_{s in [starts[v], starts[v+1])} dy[position(s), j], slots in order.
__global__ void embedding_backward_rows_kernel(const uint64_t* __restrict__ keys, const int64_t* __restrict__ starts,
                                               const float* __restrict__ dy, int64_t V, int64_t D,
                                               float* __restrict__ dweight) {
  for (int64_t v = blockIdx.y; v < V; v += gridDim.y) {
    const int64_t begin = starts[v], end = starts[v + 1];
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < D;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float acc = 0.0f;
      for (int64_t s = begin; s < end; ++s) acc += dy[static_cast<int64_t>(keys[s] & 0xFFFFFFFFull) * D + j];
      dweight[v * D + j] = acc;
    }
  }
}

// ---- helpers of the launchers ----

unsigned capped_grid(int64_t blocks, int64_t cap) {
  const int64_t g = blocks < cap ? blocks : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

// Threads of a column kernel: one warp per 32 columns, at most kColumnThreads.
int column_threads(int64_t cols) {
  return cols >= kColumnThreads ? kColumnThreads : static_cast<int>(ceil_div(cols, kWarpSize) * kWarpSize);
}

}  // namespace

// ---- launchers ----

void CudaBackend::embedding_forward(const Tensor& indices, const Tensor& weight, Tensor& out) {
  if (HalfStaging::needed({&weight, &out})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    embedding_forward(indices, s.in(weight), s.out(out));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(indices.dtype() == DType::Int64 && all_float32({&weight, &out}) &&
                         all_contiguous({&indices, &weight, &out}));
  MINIDL_INTERNAL_ASSERT(weight.dim() == 2 && out.dim() == 2 && out.shape()[0] == indices.numel() &&
                             out.shape()[1] == weight.shape()[1],
                         "indices ", indices.shape(), ", weight ", weight.shape(), ", out ", out.shape());
  const int64_t n = indices.numel(), V = weight.shape()[0], D = weight.shape()[1];
  if (n == 0 || D == 0) return;
  DeviceGuard guard(device_index());
  const int threads = column_threads(D);
  const dim3 grid(capped_grid(ceil_div(D, threads), 65535), capped_grid(n, kMaxGridY));
  MINIDL_LAUNCH(embedding_forward_kernel, grid, threads, 0, stream(), indices.data<int64_t>(), weight.data<float>(), n,
                V, D, out.data<float>());
}

void CudaBackend::embedding_backward(const Tensor& dy, const Tensor& indices, Tensor& dweight) {
  if (HalfStaging::needed({&dy, &dweight})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    embedding_backward(s.in(dy), indices, s.out(dweight));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(indices.dtype() == DType::Int64 && all_float32({&dy, &dweight}) &&
                         all_contiguous({&dy, &indices, &dweight}));
  MINIDL_INTERNAL_ASSERT(dweight.dim() == 2 && dy.dim() == 2 && dy.shape()[0] == indices.numel() &&
                             dy.shape()[1] == dweight.shape()[1],
                         "dy ", dy.shape(), ", indices ", indices.shape(), ", dweight ", dweight.shape());
  const int64_t n = indices.numel(), V = dweight.shape()[0], D = dweight.shape()[1];
  MINIDL_CHECK(n <= 2147483647 && V < static_cast<int64_t>(kOutOfRange), "embedding_backward: ", n,
               " positions and ", V, " rows exceed the sort keys of the CUDA kernel (at most 2^31 - 1 positions and "
               "2^32 - 2 rows)");
  if (V == 0 || D == 0) return;
  DeviceGuard guard(device_index());
  // Steps 1 and 2: the sorted keys [padded], padded = 2^⌈log2 n⌉ (1 for n <= 1: nothing to sort).
  int64_t padded = 1;
  while (padded < n) padded *= 2;
  Tensor keys_storage = empty(Shape{padded}, TensorOptions(DType::Int64, device()));  // [padded] uint64 keys
  auto* keys = static_cast<uint64_t*>(keys_storage.raw_data());
  if (n > 0) {
    MINIDL_LAUNCH(embedding_sort_keys_kernel, grid_for(padded, kThreads, multiprocessor_count()), kThreads, 0,
                  stream(), indices.data<int64_t>(), n, V, padded, keys);
  }
  if (padded >= 2) {
    const int64_t tile = padded < kSortTile ? padded : kSortTile;
    const unsigned tiles = static_cast<unsigned>(padded / tile);
    const int tile_threads = static_cast<int>(tile / 2);
    MINIDL_LAUNCH(bitonic_sort_tile_kernel, tiles, tile_threads, 0, stream(), keys, int64_t{2}, tile);
    const unsigned step_grid = grid_for(padded / 2, kThreads, multiprocessor_count());
    for (int64_t k = 2 * tile; k <= padded; k *= 2) {
      for (int64_t j = k / 2; j >= tile; j /= 2)
        MINIDL_LAUNCH(bitonic_sort_step_kernel, step_grid, kThreads, 0, stream(), keys, padded / 2, k, j);
      MINIDL_LAUNCH(bitonic_sort_tile_kernel, tiles, tile_threads, 0, stream(), keys, k, k);
    }
  }
  // Step 3: starts [V + 1].
  Tensor starts = empty(Shape{V + 1}, TensorOptions(DType::Int64, device()));
  MINIDL_LAUNCH(embedding_row_starts_kernel, grid_for(V + 1, kThreads, multiprocessor_count()), kThreads, 0, stream(),
                keys, n, V, starts.data<int64_t>());
  // Step 4: every row of dweight.
  const int threads = column_threads(D);
  const dim3 grid(capped_grid(ceil_div(D, threads), 65535), capped_grid(V, kMaxGridY));
  MINIDL_LAUNCH(embedding_backward_rows_kernel, grid, threads, 0, stream(), keys, starts.data<int64_t>(),
                n > 0 ? dy.data<float>() : nullptr, V, D, dweight.data<float>());
}

}  // namespace minidl::cuda
