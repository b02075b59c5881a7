// CUDA dropout mask (float32): mask[i] = 1/(1 − p) when the Philox uniform of counter offset + i
// (core/philox.h, 24 bits as a float, as on the CPU) is below 1 − p, else 0 — the same bits
// as kernels/cpu/dropout.cpp for the same seed. The op multiplies by it (forward and backward).
// One thread per element in a grid-stride loop; the ten Philox rounds are integer multiplies,
// so the kernel is bound by the write bandwidth only for large tensors.
#include "core/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

// ---- kernels ----

__global__ void dropout_mask_kernel(float* __restrict__ mask, int64_t n, float keep, float scale, uint64_t seed,
                                    uint64_t offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = philox::uniform_float(philox::block_for(seed, offset, static_cast<uint64_t>(i)));
    mask[i] = u < keep ? scale : 0.0f;
  }
}

}  // namespace

// ---- launchers ----

void CudaBackend::dropout_mask(Tensor& mask, double p, uint64_t seed, uint64_t offset) {
  refuse_in_capture("dropout", kRandomInCapture);
  MINIDL_INTERNAL_ASSERT(mask.dtype() == DType::Float32, "dropout_mask: the mask is ", mask.dtype());
  const int64_t n = mask.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const float keep = static_cast<float>(1.0 - p);
  const float scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  MINIDL_LAUNCH(dropout_mask_kernel, grid_for(n, kThreads, multiprocessor_count()), kThreads, 0, stream(),
                mask.data<float>(), n, keep, scale, seed, offset);
}

}  // namespace minidl::cuda
