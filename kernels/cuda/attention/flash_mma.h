// The tensor-core forward of scaled dot-product attention for 16-bit q, k, v (flash_mma.cu),
// which CudaBackend::attention_forward (attention.cu) takes where it applies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace minidl::cuda {

// Whether flash_mma_forward runs this problem on a device of compute capability cc_major.x:
// q, k, v all bfloat16 or all float16, one head size D = E = Ev in {16, 32, 64, 128}, stride 1
// along it, and mma.sync on the device (sm_80 and later).
bool flash_mma_applies(const Tensor& q, const Tensor& k, const Tensor& v, int cc_major);

// out [B, H, L, D] (q's dtype, contiguous) and lse [B, H, L] (float32, contiguous) of
// q [B, H, L, D], k, v [B, H, S, D] with S >= 1, L >= 1, queued on `stream`.
void flash_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, double dropout_p,
                       uint64_t seed, uint64_t offset, Tensor& out, Tensor& lse, cudaStream_t stream);

}  // namespace minidl::cuda
