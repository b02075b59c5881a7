// Multi-tensor kernels in the CUDA backend (float32): one launch over a list of tensors, the
// gradients of clip_grad_norm_.
//   multi_tensor_norm:  out = (Σ_tensors Σ_i |x_i|^p)^(1/p), or max |x_i| for p = inf
//   multi_tensor_clip:  x_i *= c, c = min(max_norm / (norm[0] + 1e-6), 1), in place
//   unscale:            x_i *= inv_scale in place, found_inf = 1 if any x_i was inf or NaN (GradScaler)
// Strategy: one launch over the tensor table of kernels/cuda/tensor_table.cuh (PyTorch's
// multi_tensor_apply), 256 threads over each chunk of 4096 elements.
// The norm reduces each block's chunks to one partial in a fixed order, and the last block to
// finish (an atomic ticket after a memory fence) combines the partials in block order, in double,
// and takes the root: one launch, and the same bits every run for a given grid.
#include <cmath>
#include <vector>

#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/tensor_table.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096;  // elements per chunk: 16 per thread

enum class NormKind : int { Max, One, Two, Pow };

using Table = TensorTable<1>;

// max(a, b) that keeps a NaN (fmaxf drops one): the norm of a NaN gradient is NaN, as in PyTorch.
__device__ inline float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

__device__ inline float norm_term(float x, NormKind kind, float p) {
  const float a = fabsf(x);
  switch (kind) {
    case NormKind::Max:
    case NormKind::One: return a;
    case NormKind::Two: return x * x;
    case NormKind::Pow: return powf(a, p);
  }
  return a;
}

// ---- kernels ----

__global__ void __launch_bounds__(kThreads)
    multi_tensor_norm_kernel(Table tab, int64_t chunks, NormKind kind, float p, float* __restrict__ partial,
                             unsigned int* __restrict__ ticket, float* __restrict__ out) {
  __shared__ float scratch[kWarpSize];
  __shared__ bool last;
  const bool is_max = kind == NormKind::Max;
  float acc = 0.0f;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = tensor_of(tab, c);
    const float* x = tensor_data(tab, 0, t);
    const int64_t begin = (c - tab.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < tab.numel[t] ? begin + kChunk : tab.numel[t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = norm_term(x[i], kind, p);
      acc = is_max ? nan_max(acc, v) : acc + v;
    }
  }
  // The block's partial, in a fixed order.
  if (is_max) {
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) acc = nan_max(acc, __shfl_xor_sync(0xffffffffu, acc, offset));
    if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) acc = nan_max(acc, scratch[w]);
    }
  } else {
    acc = block_sum(acc, scratch);
  }
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = acc;
    __threadfence();  // the partial is visible to every block before the ticket says so
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last && threadIdx.x == 0) {
    __threadfence();
    const volatile float* parts = partial;
    double total = 0.0;
    for (unsigned b = 0; b < gridDim.x; ++b) {
      const double v = parts[b];
      total = is_max ? ((total != total || total > v) ? total : v) : total + v;
    }
    const double norm = kind == NormKind::Two ? sqrt(total) : kind == NormKind::Pow ? pow(total, 1.0 / p) : total;
    out[0] = static_cast<float>(norm);
  }
}

__global__ void __launch_bounds__(kThreads)
    multi_tensor_clip_kernel(Table tab, int64_t chunks, const float* __restrict__ norm, float max_norm) {
  const float coef = max_norm / (norm[0] + 1e-6f);
  const float s = coef > 1.0f ? 1.0f : coef;  // NaN fails the test and stays
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = tensor_of(tab, c);
    float* x = tensor_data(tab, 0, t);
    const int64_t begin = (c - tab.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < tab.numel[t] ? begin + kChunk : tab.numel[t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] *= s;
  }
}

// x *= inv_scale over every tensor; found_inf = 1 where an element was not finite before. The
// flag is written with atomicExch: many threads may find a bad value at once, and they all
// write the same 1, but an unordered plain store from several threads is still a data race.
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(Table tab, int64_t chunks, float inv_scale, float* __restrict__ found_inf) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = tensor_of(tab, c);
    float* x = tensor_data(tab, 0, t);
    const int64_t begin = (c - tab.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < tab.numel[t] ? begin + kChunk : tab.numel[t];
    bool bad = false;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = x[i];
      bad = bad || !isfinite(v);
      x[i] = v * inv_scale;
    }
    if (bad) atomicExch(found_inf, 1.0f);
  }
}

// ---- host helpers ----

bool all_contiguous_float32(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors)
    if (t.dtype() != DType::Float32 || !t.is_contiguous()) return false;
  return true;
}

}  // namespace

// ---- launchers ----

void CudaBackend::multi_tensor_norm(const std::vector<Tensor>& tensors, double p, Tensor& out) {
  if (HalfStaging::needed(tensors) || HalfStaging::needed({&out})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    multi_tensor_norm(s.in(tensors), p, s.out(out));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(!tensors.empty() && p > 0.0 && all_contiguous_float32(tensors) &&
                         out.dtype() == DType::Float32 && out.numel() == 1);
  DeviceGuard guard(device_index());
  Tensor table_storage;
  int64_t chunks = 0;
  const Table tab = upload_tensor_table<1>(*this, {&tensors}, kChunk, table_storage, chunks);
  const NormKind kind = std::isinf(p) ? NormKind::Max : p == 1.0 ? NormKind::One : p == 2.0 ? NormKind::Two : NormKind::Pow;
  const unsigned blocks = grid_for(chunks, 1, multiprocessor_count(), 4);
  // partial [blocks] floats and the ticket word, one allocation; the ticket starts at 0.
  Tensor scratch = empty(Shape{static_cast<int64_t>(blocks) + 1}, TensorOptions(DType::Float32, device()));
  float* partial = scratch.data<float>();
  auto* ticket = reinterpret_cast<unsigned int*>(partial + blocks);
  MINIDL_CUDA_CHECK(cudaMemsetAsync(ticket, 0, sizeof(unsigned int), stream()));
  MINIDL_LAUNCH(multi_tensor_norm_kernel, blocks, kThreads, 0, stream(), tab, chunks, kind, static_cast<float>(p),
                partial, ticket, out.data<float>());
}

void CudaBackend::multi_tensor_clip(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) {
  if (HalfStaging::needed(tensors) || HalfStaging::needed({&total_norm})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    std::vector<Tensor> targets = tensors;  // handles: rounding into them writes the callers' tensors
    multi_tensor_clip(s.inout(targets), s.in(total_norm), max_norm);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_contiguous_float32(tensors) && total_norm.dtype() == DType::Float32 &&
                         total_norm.numel() == 1);
  DeviceGuard guard(device_index());
  Tensor table_storage;
  int64_t chunks = 0;
  const Table tab = upload_tensor_table<1>(*this, {&tensors}, kChunk, table_storage, chunks);
  if (chunks == 0) return;
  const unsigned blocks = grid_for(chunks, 1, multiprocessor_count(), 8);
  MINIDL_LAUNCH(multi_tensor_clip_kernel, blocks, kThreads, 0, stream(), tab, chunks, total_norm.data<float>(),
                static_cast<float>(max_norm));
}

void CudaBackend::unscale_and_check_finite(const std::vector<Tensor>& tensors, float inv_scale, Tensor& found_inf) {
  if (HalfStaging::needed(tensors)) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    std::vector<Tensor> targets = tensors;  // handles: rounding into them writes the callers' tensors
    unscale_and_check_finite(s.inout(targets), inv_scale, found_inf);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_contiguous_float32(tensors) && found_inf.dtype() == DType::Float32 && found_inf.numel() == 1);
  DeviceGuard guard(device_index());
  Tensor table_storage;
  int64_t chunks = 0;
  const Table tab = upload_tensor_table<1>(*this, {&tensors}, kChunk, table_storage, chunks);
  if (chunks == 0) return;
  const unsigned blocks = grid_for(chunks, 1, multiprocessor_count(), 8);
  MINIDL_LAUNCH(unscale_kernel, blocks, kThreads, 0, stream(), tab, chunks, inv_scale, found_inf.data<float>());
}

}  // namespace minidl::cuda
