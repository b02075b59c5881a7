// Fused optimizer updates on the GPU: each parameter's p, g (and the state) are read once and
// written back once — the same rules, in the same float32 order, as kernels/cpu/optimizer.cpp:
//   SGD:  d = g + wd·p;  buf = first ? d : μ·buf + (1-τ)·d;  d = nesterov ? d + μ·buf : buf;  p -= lr·d
//   Adam: g (+ wd·p, or AdamW: p *= 1 - lr·wd);  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;
//         p -= (lr / (1-β1^t)) · m / (sqrt(v) / sqrt(1-β2^t) + eps)
// The step-dependent scalars are computed once on the host in double. One thread per element,
// grid-stride; memory-bound, so no vectorisation tricks beyond coalesced access.
// sgd_step_many / adam_step_many: the same element updates over every parameter of a list in
// one launch, walking the chunks of the tensor table (kernels/cuda/tensor_table.cuh) — the
// optimizer's step is then one launch per group, device and dtype instead of one per parameter.
#include <cmath>

#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/tensor_table.cuh"

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

constexpr int64_t kChunk = 4096;  // elements per chunk of the multi-tensor updates: 16 per thread

// ---- the element updates, shared by the single and the multi-tensor kernels ----

__device__ inline void sgd_element(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                                   int64_t i, const SgdScalars& s) {
  const float pi = p[i];
  float d = g[i] + s.wd * pi;
  if (s.use_momentum) {
    const float b = s.first_step ? d : s.mu * buf[i] + s.damp * d;
    buf[i] = b;
    d = s.nesterov ? d + s.mu * b : b;
  }
  p[i] = pi - s.lr * d;
}

__device__ inline void adam_element(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                    float* __restrict__ v, int64_t i, const AdamScalars& s) {
  float pi = p[i], gi = g[i];
  if (s.decoupled) pi *= s.decay;
  else gi += s.wd * pi;
  const float mi = s.b1 * m[i] + s.one_minus_b1 * gi;
  const float vi = s.b2 * v[i] + s.one_minus_b2 * gi * gi;
  m[i] = mi;
  v[i] = vi;
  p[i] = pi - s.step_size * mi / (sqrtf(vi) / s.bc2_sqrt + s.eps);
}

// ---- kernels ----

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf, int64_t n,
                           SgdScalars s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    sgd_element(p, g, buf, i, s);
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, AdamScalars s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    adam_element(p, g, m, v, i, s);
}

// Lists: 0 parameters, 1 gradients, 2 momentum buffers (null without momentum).
__global__ void __launch_bounds__(kThreads) sgd_many_kernel(TensorTable<3> tab, int64_t chunks, SgdScalars s) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = tensor_of(tab, c);
    float* p = tensor_data(tab, 0, t);
    const float* g = tensor_data(tab, 1, t);
    float* buf = tensor_data(tab, 2, t);
    const int64_t begin = (c - tab.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < tab.numel[t] ? begin + kChunk : tab.numel[t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) sgd_element(p, g, buf, i, s);
  }
}

// Lists: 0 parameters, 1 gradients, 2 exp_avg, 3 exp_avg_sq.
__global__ void __launch_bounds__(kThreads) adam_many_kernel(TensorTable<4> tab, int64_t chunks, AdamScalars s) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = tensor_of(tab, c);
    float* p = tensor_data(tab, 0, t);
    const float* g = tensor_data(tab, 1, t);
    float* m = tensor_data(tab, 2, t);
    float* v = tensor_data(tab, 3, t);
    const int64_t begin = (c - tab.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < tab.numel[t] ? begin + kChunk : tab.numel[t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) adam_element(p, g, m, v, i, s);
  }
}

SgdScalars sgd_scalars(const SGDConfig& cfg, bool has_buffers) {
  return SgdScalars{static_cast<float>(cfg.lr),
                    static_cast<float>(cfg.momentum),
                    static_cast<float>(cfg.weight_decay),
                    static_cast<float>(1.0 - cfg.dampening),
                    cfg.momentum != 0.0 && has_buffers,
                    cfg.first_step,
                    cfg.nesterov};
}

AdamScalars adam_scalars(const AdamConfig& cfg) {
  const double t = static_cast<double>(cfg.step);
  return AdamScalars{static_cast<float>(cfg.beta1),
                     static_cast<float>(1.0 - cfg.beta1),
                     static_cast<float>(cfg.beta2),
                     static_cast<float>(1.0 - cfg.beta2),
                     static_cast<float>(cfg.lr / (1.0 - std::pow(cfg.beta1, t))),
                     static_cast<float>(std::sqrt(1.0 - std::pow(cfg.beta2, t))),
                     static_cast<float>(cfg.eps),
                     static_cast<float>(cfg.weight_decay),
                     static_cast<float>(1.0 - cfg.lr * cfg.weight_decay),
                     cfg.decoupled_weight_decay};
}

bool all_float32_contiguous(const std::vector<Tensor>& list) {
  for (const Tensor& t : list)
    if (t.dtype() != DType::Float32 || !t.is_contiguous()) return false;
  return true;
}

// Why a graph capture refuses these steps (graph.cu): their host-side state would be frozen
// into the graph. The learning rate, weight decay and momentum are kernel arguments too: a
// graph replays the values it was captured with (capture again after changing them).
constexpr const char* kFirstSgdStepInCapture =
    "it starts the momentum buffers from the gradient, and every replay would start them again; take one step "
    "before capturing";
constexpr const char* kAdamStepInCapture =
    "its bias correction is computed on the host from the step count, which a replay would not advance";

}  // namespace

// ---- launchers ----

void CudaBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) {
  if (HalfStaging::needed({&param, &grad, &momentum_buffer})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    sgd_step(s.inout(param), s.in(grad), s.inout(momentum_buffer), cfg);
    return s.commit();
  }
  // The optimizer's checks: a floating parameter (float32 on a device), its gradient alike.
  MINIDL_INTERNAL_ASSERT(all_float32({&param, &grad, &momentum_buffer}) &&
                         all_contiguous({&param, &grad, &momentum_buffer}) && grad.numel() == param.numel());
  if (cfg.first_step && cfg.momentum != 0.0) refuse_in_capture("SGD's first step with momentum", kFirstSgdStepInCapture);
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  float* buf = momentum_buffer.defined() ? momentum_buffer.data<float>() : nullptr;
  MINIDL_LAUNCH(sgd_kernel, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_, param.data<float>(),
                grad.data<float>(), buf, n, sgd_scalars(cfg, buf != nullptr));
}

void CudaBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            const AdamConfig& cfg) {
  if (HalfStaging::needed({&param, &grad, &exp_avg, &exp_avg_sq})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    adam_step(s.inout(param), s.in(grad), s.inout(exp_avg), s.inout(exp_avg_sq), cfg);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(all_float32({&param, &grad, &exp_avg, &exp_avg_sq}) &&
                         all_contiguous({&param, &grad, &exp_avg, &exp_avg_sq}) && grad.numel() == param.numel());
  refuse_in_capture("Adam's step", kAdamStepInCapture);
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  MINIDL_LAUNCH(adam_kernel, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_, param.data<float>(),
                grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(), n, adam_scalars(cfg));
}

void CudaBackend::sgd_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                std::vector<Tensor>& momentum_buffers, const SGDConfig& cfg) {
  // float32 math (kernels/half_staging.h)
  if (HalfStaging::needed(params) || HalfStaging::needed(grads) || HalfStaging::needed(momentum_buffers)) {
    HalfStaging s;
    const std::vector<Tensor> staged_grads = s.in(grads);
    sgd_step_many(s.inout(params), staged_grads, s.inout(momentum_buffers), cfg);
    return s.commit();
  }
  const bool has_buffers = !momentum_buffers.empty() && momentum_buffers[0].defined();
  MINIDL_INTERNAL_ASSERT(grads.size() == params.size() && momentum_buffers.size() == params.size() &&
                         all_float32_contiguous(params) && all_float32_contiguous(grads) &&
                         (!has_buffers || all_float32_contiguous(momentum_buffers)));
  if (cfg.first_step && cfg.momentum != 0.0) refuse_in_capture("SGD's first step with momentum", kFirstSgdStepInCapture);
  if (params.empty()) return;
  DeviceGuard guard(device_);
  Tensor table_storage;
  int64_t chunks = 0;
  const TensorTable<3> tab =
      upload_tensor_table<3>(*this, {&params, &grads, &momentum_buffers}, kChunk, table_storage, chunks);
  if (chunks == 0) return;
  MINIDL_LAUNCH(sgd_many_kernel, grid_for(chunks, 1, sm_count_, 8), kThreads, 0, stream_, tab, chunks,
                sgd_scalars(cfg, has_buffers));
}

void CudaBackend::adam_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                 std::vector<Tensor>& exp_avgs, std::vector<Tensor>& exp_avg_sqs, const AdamConfig& cfg) {
  if (HalfStaging::needed(params) || HalfStaging::needed(grads) || HalfStaging::needed(exp_avgs) ||
      HalfStaging::needed(exp_avg_sqs)) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    const std::vector<Tensor> staged_grads = s.in(grads);
    adam_step_many(s.inout(params), staged_grads, s.inout(exp_avgs), s.inout(exp_avg_sqs), cfg);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                         exp_avg_sqs.size() == params.size() && all_float32_contiguous(params) &&
                         all_float32_contiguous(grads) && all_float32_contiguous(exp_avgs) &&
                         all_float32_contiguous(exp_avg_sqs));
  refuse_in_capture("Adam's step", kAdamStepInCapture);
  if (params.empty()) return;
  DeviceGuard guard(device_);
  Tensor table_storage;
  int64_t chunks = 0;
  const TensorTable<4> tab =
      upload_tensor_table<4>(*this, {&params, &grads, &exp_avgs, &exp_avg_sqs}, kChunk, table_storage, chunks);
  if (chunks == 0) return;
  MINIDL_LAUNCH(adam_many_kernel, grid_for(chunks, 1, sm_count_, 8), kThreads, 0, stream_, tab, chunks,
                adam_scalars(cfg));
}

}  // namespace minidl::cuda
