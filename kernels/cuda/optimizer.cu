// Fused optimizer updates on the GPU: one kernel per parameter reads p, g (and the state) once
// and writes them back once — the same rules, in the same float32 order, as kernels/cpu/optimizer.cpp:
//   SGD:  d = g + wd·p;  buf = first ? d : μ·buf + (1-τ)·d;  d = nesterov ? d + μ·buf : buf;  p -= lr·d
//   Adam: g (+ wd·p, or AdamW: p *= 1 - lr·wd);  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;
//         p -= (lr / (1-β1^t)) · m / (sqrt(v) / sqrt(1-β2^t) + eps)
// The step-dependent scalars are computed once on the host in double. One thread per element,
// grid-stride; memory-bound, so no vectorisation tricks beyond coalesced access.
#include <cmath>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

struct SgdScalars {
  float lr, mu, wd, damp;
  bool use_momentum, first_step, nesterov;
};

// Computed in double on the host and rounded once, as on the CPU (1 - β1 and 1 - β2 too).
struct AdamScalars {
  float b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps, wd, decay;
  bool decoupled;
};

// ---- kernels ----

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf, int64_t n,
                           SgdScalars s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float pi = p[i];
    float d = g[i] + s.wd * pi;
    if (s.use_momentum) {
      const float b = s.first_step ? d : s.mu * buf[i] + s.damp * d;
      buf[i] = b;
      d = s.nesterov ? d + s.mu * b : b;
    }
    p[i] = pi - s.lr * d;
  }
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, AdamScalars s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float pi = p[i], gi = g[i];
    if (s.decoupled) pi *= s.decay;
    else gi += s.wd * pi;
    const float mi = s.b1 * m[i] + s.one_minus_b1 * gi;
    const float vi = s.b2 * v[i] + s.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - s.step_size * mi / (sqrtf(vi) / s.bc2_sqrt + s.eps);
  }
}

}  // namespace

// ---- launchers ----

void CudaBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) {
  // The optimizer's checks: a floating parameter (float32 on a device), its gradient alike.
  MINIDL_INTERNAL_ASSERT(all_float32({&param, &grad, &momentum_buffer}) &&
                         all_contiguous({&param, &grad, &momentum_buffer}) && grad.numel() == param.numel());
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  float* buf = momentum_buffer.defined() ? momentum_buffer.data<float>() : nullptr;
  const SgdScalars s{static_cast<float>(cfg.lr),
                     static_cast<float>(cfg.momentum),
                     static_cast<float>(cfg.weight_decay),
                     static_cast<float>(1.0 - cfg.dampening),
                     cfg.momentum != 0.0 && buf != nullptr,
                     cfg.first_step,
                     cfg.nesterov};
  MINIDL_LAUNCH(sgd_kernel, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_, param.data<float>(),
                grad.data<float>(), buf, n, s);
}

void CudaBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            const AdamConfig& cfg) {
  MINIDL_INTERNAL_ASSERT(all_float32({&param, &grad, &exp_avg, &exp_avg_sq}) &&
                         all_contiguous({&param, &grad, &exp_avg, &exp_avg_sq}) && grad.numel() == param.numel());
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  const double t = static_cast<double>(cfg.step);
  const AdamScalars s{static_cast<float>(cfg.beta1),
                      static_cast<float>(1.0 - cfg.beta1),
                      static_cast<float>(cfg.beta2),
                      static_cast<float>(1.0 - cfg.beta2),
                      static_cast<float>(cfg.lr / (1.0 - std::pow(cfg.beta1, t))),
                      static_cast<float>(std::sqrt(1.0 - std::pow(cfg.beta2, t))),
                      static_cast<float>(cfg.eps),
                      static_cast<float>(cfg.weight_decay),
                      static_cast<float>(1.0 - cfg.lr * cfg.weight_decay),
                      cfg.decoupled_weight_decay};
  MINIDL_LAUNCH(adam_kernel, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_, param.data<float>(),
                grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(), n, s);
}

}  // namespace minidl::cuda
