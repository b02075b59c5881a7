// CUDA dropout mask (float32, bfloat16, float16): mask[i] = 1/(1 − p) when the Philox uniform of counter offset + i
// (core/philox.h, 24 bits as a float, as on the CPU) is below 1 − p, else 0 — the same bits
// as kernels/cpu/dropout.cpp for the same seed. The op multiplies by it (forward and backward).
// One thread per element in a grid-stride loop; the ten Philox rounds are integer multiplies,
// so the kernel is bound by the write bandwidth only for large tensors. A 16-bit mask holds the
// same decisions with 1/(1 − p) rounded once on the host (core/half.h, as the CPU rounds it);
// each thread writes 8 consecutive elements as one 16-byte uint4 (Note [16-bit vectors],
// elementwise.cu) when the mask starts 16-byte aligned, which a fresh tensor does, else one
// element at a time.
#include <cstdint>
#include <type_traits>

#include "core/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/half.cuh"
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

// mask [n] of 16-bit T; scale_bits: 1/(1 − p) in T. vectors: the number of whole groups of 8
// written as uint4s (0 when the mask is not 16-byte aligned); the elements after them are scalar.
template <typename T>
__global__ void dropout_mask_half_kernel(T* __restrict__ mask, int64_t n, int64_t vectors, float keep,
                                         unsigned short scale_bits, uint64_t seed, uint64_t offset) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const unsigned scale = scale_bits;
  uint4* m8 = reinterpret_cast<uint4*>(mask);
  for (int64_t v = tid; v < vectors; v += stride) {
    unsigned w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // elements 8v + 2j (low half) and 8v + 2j + 1 (high half)
      const uint64_t i = static_cast<uint64_t>(8 * v + 2 * j);
      const float u0 = philox::uniform_float(philox::block_for(seed, offset, i));
      const float u1 = philox::uniform_float(philox::block_for(seed, offset, i + 1));
      w[j] = (u0 < keep ? scale : 0u) | ((u1 < keep ? scale : 0u) << 16);
    }
    m8[v] = make_uint4(w[0], w[1], w[2], w[3]);
  }
  for (int64_t i = 8 * vectors + tid; i < n; i += stride) {
    const float u = philox::uniform_float(philox::block_for(seed, offset, static_cast<uint64_t>(i)));
    mask[i] = from_bits<T>(u < keep ? scale_bits : static_cast<unsigned short>(0));
  }
}

}  // namespace

// ---- launchers ----

void CudaBackend::dropout_mask(Tensor& mask, double p, uint64_t seed, uint64_t offset) {
  refuse_in_capture("dropout", kRandomInCapture);
  MINIDL_INTERNAL_ASSERT(mask.dtype() == DType::Float32 || is_half(mask.dtype()), "dropout_mask: the mask is ",
                         mask.dtype());
  const int64_t n = mask.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const float keep = static_cast<float>(1.0 - p);
  if (is_half(mask.dtype())) {
    const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    const unsigned short bits =
        mask.dtype() == DType::BFloat16 ? convert<bfloat16>(scale).bits() : convert<float16>(scale).bits();
    const bool aligned = reinterpret_cast<uintptr_t>(mask.raw_data()) % 16 == 0;
    const int64_t vectors = aligned ? n / 8 : 0;
    const unsigned grid = grid_for(vectors > 0 ? vectors : n, kThreads, multiprocessor_count());
    dispatch_float_and_half(mask.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, float>) {
        MINIDL_LAUNCH(dropout_mask_half_kernel<T>, grid, kThreads, 0, stream(), static_cast<T*>(mask.raw_data()), n,
                      vectors, keep, bits, seed, offset);
      }
    });
    return;
  }
  const float scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  MINIDL_LAUNCH(dropout_mask_kernel, grid_for(n, kThreads, multiprocessor_count()), kThreads, 0, stream(),
                mask.data<float>(), n, keep, scale, seed, offset);
}

}  // namespace minidl::cuda
