// CUDA batch normalisation (float32) over x viewed as [N, C, S], the formulas of
// kernels/cpu/batch_norm.cpp:
//   training: mean_c, biased var_c over (N, S); running ← (1 − m)·running + m·(mean, unbiased var)
//   eval:     mean_c, var_c = the running statistics
//   y = (x − mean_c)·invstd_c·γ_c + β_c
//   backward: dβ = Σ dy, dγ = Σ dy·x̂;  dx = γ·invstd/M·(M·dy − dβ − x̂·dγ) (training), γ·invstd·dy (eval)
// Strategy: statistics and the backward sums are one block per channel (kThreads threads
// stride the channel's N planes of S elements, then block_sum, in a fixed order: the result
// repeats bit for bit); the statistics take two passes over the channel (mean, then the
// centred squares), like the CPU. The elementwise passes are one thread per element. All
// bandwidth-bound: 2 reads + 1 write of x forward, 3 reads + 1 write backward; with C = 32
// to 64 channels the per-channel blocks fill only part of an H200, which is what limits the
// reductions for small batches.
#include "core/error.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

struct Layout {
  int64_t n, c, s;
};
Layout layout_of(const Tensor& x) {
  int64_t s = 1;
  for (int d = 2; d < x.dim(); ++d) s *= x.shape()[d];
  return {x.shape()[0], x.shape()[1], s};
}

// ---- kernels ----

// One block per channel: mean, invstd and the running-statistics update.
__global__ void batch_norm_stats_kernel(const float* __restrict__ x, Layout l, double momentum, double eps,
                                        float* __restrict__ mean, float* __restrict__ invstd,
                                        float* __restrict__ running_mean, float* __restrict__ running_var) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x, M = l.n * l.s;
  float sum = 0.0f;
  for (int64_t k = threadIdx.x; k < M; k += blockDim.x) sum += x[((k / l.s) * l.c + c) * l.s + k % l.s];
  const float mu = block_sum(sum, scratch) / static_cast<float>(M);
  float sq = 0.0f;
  for (int64_t k = threadIdx.x; k < M; k += blockDim.x) {
    const float d = x[((k / l.s) * l.c + c) * l.s + k % l.s] - mu;
    sq += d * d;
  }
  const float var = block_sum(sq, scratch) / static_cast<float>(M);
  if (threadIdx.x == 0) {
    mean[c] = mu;
    invstd[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(var) + eps));
    if (running_mean) running_mean[c] = static_cast<float>((1 - momentum) * running_mean[c] + momentum * mu);
    if (running_var)
      running_var[c] = static_cast<float>((1 - momentum) * running_var[c] +
                                          momentum * static_cast<double>(var) * M / static_cast<double>(M - 1));
  }
}

__global__ void batch_norm_eval_stats_kernel(const float* __restrict__ running_mean,
                                             const float* __restrict__ running_var, int64_t channels, double eps,
                                             float* __restrict__ mean, float* __restrict__ invstd) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mean[c] = running_mean[c];
    invstd[c] = static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[c]) + eps));
  }
}

// y = x·scale_c + shift_c with scale = invstd·γ, shift = β − mean·scale.
__global__ void batch_norm_apply_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                        const float* __restrict__ invstd, const float* __restrict__ weight,
                                        const float* __restrict__ bias, float* __restrict__ y, Layout l) {
  const int64_t total = l.n * l.c * l.s;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (idx / l.s) % l.c;
    const float scale = invstd[c] * (weight ? weight[c] : 1.0f);
    const float shift = (bias ? bias[c] : 0.0f) - mean[c] * scale;
    y[idx] = x[idx] * scale + shift;
  }
}

// One block per channel: sums[c] = Σ dy, sums[C + c] = Σ dy·x̂.
__global__ void batch_norm_backward_sums_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                                const float* __restrict__ mean, const float* __restrict__ invstd,
                                                Layout l, float* __restrict__ sums) {
  __shared__ float scratch[32];
  const int64_t c = blockIdx.x, M = l.n * l.s;
  const float mu = mean[c];
  float a = 0.0f, b = 0.0f;
  for (int64_t k = threadIdx.x; k < M; k += blockDim.x) {
    const int64_t i = ((k / l.s) * l.c + c) * l.s + k % l.s;
    a += dy[i];
    b += dy[i] * (x[i] - mu);
  }
  a = block_sum(a, scratch);
  b = block_sum(b, scratch);
  if (threadIdx.x == 0) {
    sums[c] = a;
    sums[l.c + c] = b * invstd[c];
  }
}

__global__ void batch_norm_backward_dx_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                              const float* __restrict__ mean, const float* __restrict__ invstd,
                                              const float* __restrict__ weight, const float* __restrict__ sums,
                                              bool training, Layout l, float* __restrict__ dx) {
  const int64_t total = l.n * l.c * l.s;
  const float M = static_cast<float>(l.n * l.s);
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (idx / l.s) % l.c;
    const float k = invstd[c] * (weight ? weight[c] : 1.0f);
    if (!training) {
      dx[idx] = k * dy[idx];
    } else {
      const float xhat = (x[idx] - mean[c]) * invstd[c];
      dx[idx] = k * (dy[idx] - sums[c] / M - xhat * sums[l.c + c] / M);
    }
  }
}

// out[c] = sums[offset + c] (dγ or dβ from the sums buffer).
__global__ void copy_channels_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t channels) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[c] = src[c];
}

const float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* data_or_null(Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

// ---- launchers ----

void CudaBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                                     Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                                     Tensor& save_mean, Tensor& save_invstd) {
  // float32 math (kernels/half_staging.h)
  if (HalfStaging::needed({&x, &weight, &bias, &running_mean, &running_var, &y, &save_mean, &save_invstd})) {
    HalfStaging s;
    batch_norm_forward(s.in(x), s.in(weight), s.in(bias), s.inout(running_mean), s.inout(running_var), training,
                       momentum, eps, s.out(y), s.out(save_mean), s.out(save_invstd));
    return s.commit();
  }
  DeviceGuard guard(device_index());
  MINIDL_INTERNAL_ASSERT(x.dtype() == DType::Float32, "batch_norm_forward: x is ", x.dtype());
  const Layout l = layout_of(x);
  MINIDL_CHECK(l.c <= 2147483647, "batch_norm_forward: ", l.c, " channels exceed the CUDA grid");
  // No channel: nothing to write (y, save_mean, save_invstd are empty), and the training stats'
  // grid of one block per channel would be 0 blocks, which CUDA refuses. An empty batch with
  // channels (evaluation only: training checks for a variance) still writes save_mean/invstd.
  if (l.c == 0) return;
  if (training) {
    MINIDL_LAUNCH(batch_norm_stats_kernel, static_cast<unsigned>(l.c), kThreads, 0, stream(), x.data<float>(), l,
                  momentum, eps, save_mean.data<float>(), save_invstd.data<float>(), data_or_null(running_mean),
                  data_or_null(running_var));
  } else {
    MINIDL_LAUNCH(batch_norm_eval_stats_kernel, grid_for(l.c, kThreads, multiprocessor_count()), kThreads, 0, stream(),
                  running_mean.data<float>(), running_var.data<float>(), l.c, eps, save_mean.data<float>(),
                  save_invstd.data<float>());
  }
  MINIDL_LAUNCH(batch_norm_apply_kernel, grid_for(x.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream(),
                x.data<float>(), save_mean.data<float>(), save_invstd.data<float>(), data_or_null(weight),
                data_or_null(bias), y.data<float>(), l);
}

void CudaBackend::batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                      const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight,
                                      Tensor& dbias) {
  // float32 math (kernels/half_staging.h)
  if (HalfStaging::needed({&dy, &x, &weight, &save_mean, &save_invstd, &dx, &dweight, &dbias})) {
    HalfStaging s;
    batch_norm_backward(s.in(dy), s.in(x), s.in(weight), s.in(save_mean), s.in(save_invstd), training, s.out(dx),
                        s.out(dweight), s.out(dbias));
    return s.commit();
  }
  DeviceGuard guard(device_index());
  MINIDL_INTERNAL_ASSERT(dy.dtype() == DType::Float32, "batch_norm_backward: dy is ", dy.dtype());
  const Layout l = layout_of(x);
  MINIDL_CHECK(l.c <= 2147483647, "batch_norm_backward: ", l.c, " channels exceed the CUDA grid");
  // No channel: dx, dγ, dβ are empty, as on the CPU (which loops over no channel); the sums
  // kernel's grid of one block per channel would be 0 blocks (cudaErrorInvalidConfiguration).
  if (l.c == 0) return;
  Tensor sums = empty(Shape{2 * l.c}, dy.options());  // [Σ dy | Σ dy·x̂]
  MINIDL_LAUNCH(batch_norm_backward_sums_kernel, static_cast<unsigned>(l.c), kThreads, 0, stream(), dy.data<float>(),
                x.data<float>(), save_mean.data<float>(), save_invstd.data<float>(), l, sums.data<float>());
  const unsigned channel_grid = grid_for(l.c, kThreads, multiprocessor_count());
  if (dbias.defined()) {
    MINIDL_LAUNCH(copy_channels_kernel, channel_grid, kThreads, 0, stream(), sums.data<float>(), dbias.data<float>(),
                  l.c);
  }
  if (dweight.defined()) {
    MINIDL_LAUNCH(copy_channels_kernel, channel_grid, kThreads, 0, stream(), sums.data<float>() + l.c,
                  dweight.data<float>(), l.c);
  }
  if (dx.defined()) {
    MINIDL_LAUNCH(batch_norm_backward_dx_kernel, grid_for(x.numel(), kThreads, multiprocessor_count()), kThreads, 0,
                  stream(), dy.data<float>(), x.data<float>(), save_mean.data<float>(), save_invstd.data<float>(),
                  data_or_null(weight), sums.data<float>(), training, l, dx.data<float>());
  }
}

}  // namespace minidl::cuda
