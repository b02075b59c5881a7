// CPU fused optimizer updates, one pass over each parameter (PyTorch's update rules):
//   SGD:  g = grad + wd·p;  buf = first ? g : μ·buf + (1-τ)·g;  g = nesterov ? g + μ·buf : buf;
//         p -= lr·g
//   Adam: g = grad (+ wd·p, or AdamW: p *= 1 - lr·wd);  m = β1·m + (1-β1)·g;
//         v = β2·v + (1-β2)·g²;  p -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)
// Each rule's element update is written once (SgdUpdate, AdamUpdate) and run by both entry points:
// sgd_step / adam_step split one parameter over the pool (parallel_for); sgd_step_many /
// adam_step_many cut every parameter of a list into chunks (kernels/cpu/tensor_chunks.h) and run
// all of them as the tasks of one parallel loop, so a model's many small tensors (biases,
// LayerNorm weights) cost one parallel region instead of one each. Every element sees the same
// arithmetic on either path, so the results are the same bits.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/tensor_chunks.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

// ---- the element updates ----

// SGD's five cases, one loop body each, so that no branch is left inside a loop (each loop is one
// vector pass); the arithmetic per element is the rule above, in the same order in every case.
enum class SgdCase { Plain, FirstNesterov, First, Nesterov, Momentum };

template <typename T, SgdCase C>
struct SgdUpdate {
  T lr, mu, wd, damp;
  // Element i of one parameter; buf is unused (may be null) in the Plain case.
  void operator()(T* p, const T* g, T* buf, int64_t i) const {
    if constexpr (C == SgdCase::Plain) {
      p[i] -= lr * (g[i] + wd * p[i]);
    } else {
      const T d = g[i] + wd * p[i];
      if constexpr (C == SgdCase::FirstNesterov) {
        buf[i] = d;
        p[i] -= lr * (d + mu * d);
      } else if constexpr (C == SgdCase::First) {
        buf[i] = d;
        p[i] -= lr * d;
      } else {
        const T b = mu * buf[i] + damp * d;
        buf[i] = b;
        if constexpr (C == SgdCase::Nesterov) p[i] -= lr * (d + mu * b);
        else p[i] -= lr * b;
      }
    }
  }
};

// Calls f(update) with the SgdUpdate of cfg's case; use_momentum: the parameters have momentum
// buffers and cfg.momentum is not 0.
template <typename T, typename F>
void with_sgd_update(const SGDConfig& cfg, bool use_momentum, F&& f) {
  const T lr = static_cast<T>(cfg.lr), mu = static_cast<T>(cfg.momentum), wd = static_cast<T>(cfg.weight_decay);
  const T damp = static_cast<T>(1.0 - cfg.dampening);
  if (!use_momentum) f(SgdUpdate<T, SgdCase::Plain>{lr, mu, wd, damp});
  else if (cfg.first_step && cfg.nesterov) f(SgdUpdate<T, SgdCase::FirstNesterov>{lr, mu, wd, damp});
  else if (cfg.first_step) f(SgdUpdate<T, SgdCase::First>{lr, mu, wd, damp});
  else if (cfg.nesterov) f(SgdUpdate<T, SgdCase::Nesterov>{lr, mu, wd, damp});
  else f(SgdUpdate<T, SgdCase::Momentum>{lr, mu, wd, damp});
}

// Adam and AdamW as two loop bodies: with the weight decay's form chosen inside the loop, the
// branch (a store to p on one side only) kept GCC from vectorising the loop at all.
template <typename T, bool Decoupled>
struct AdamUpdate {
  // Every scalar constant is computed in double and rounded to T once, as PyTorch does with its
  // Python floats: 1 - beta2 rounded from float32(beta2) would be 0.00099998713, not 0.001,
  // and every float32 step would be 6.4e-6 of itself too large.
  explicit AdamUpdate(const AdamConfig& cfg)
      : b1(static_cast<T>(cfg.beta1)),
        b2(static_cast<T>(cfg.beta2)),
        one_minus_b1(static_cast<T>(1.0 - cfg.beta1)),
        one_minus_b2(static_cast<T>(1.0 - cfg.beta2)),
        step_size(static_cast<T>(cfg.lr / (1.0 - std::pow(cfg.beta1, static_cast<double>(cfg.step))))),
        bc2_sqrt(static_cast<T>(std::sqrt(1.0 - std::pow(cfg.beta2, static_cast<double>(cfg.step))))),
        eps(static_cast<T>(cfg.eps)),
        wd(static_cast<T>(cfg.weight_decay)),
        decay(static_cast<T>(1.0 - cfg.lr * cfg.weight_decay)) {}

  // Element i of one parameter.
  void operator()(T* p, const T* g, T* m, T* v, int64_t i) const {
    T gi = g[i];
    if constexpr (Decoupled) p[i] *= decay;
    else gi += wd * p[i];
    m[i] = b1 * m[i] + one_minus_b1 * gi;
    v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
    // PyTorch's form: p -= (lr / bc1) · m / (sqrt(v) / sqrt(bc2) + eps)
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }

  T b1, b2, one_minus_b1, one_minus_b2;
  T step_size;  // lr / (1 - β1^t)
  T bc2_sqrt;   // sqrt(1 - β2^t)
  T eps, wd;
  T decay;  // 1 - lr·wd (AdamW)
};

// Calls f(update) with the AdamUpdate of cfg (Adam or AdamW).
template <typename T, typename F>
void with_adam_update(const AdamConfig& cfg, F&& f) {
  if (cfg.decoupled_weight_decay) f(AdamUpdate<T, true>(cfg));
  else f(AdamUpdate<T, false>(cfg));
}

// ---- the multi-tensor loop ----

// f(chunk) for every chunk of the list's tensors, the chunks as the tasks of one parallel loop.
template <typename F>
void for_each_chunk(const std::vector<Tensor>& tensors, F&& f) {
  const std::vector<TensorChunk> chunks = chunks_of(tensors);
  parallel_rows(static_cast<int64_t>(chunks.size()), total_numel(tensors),
                [&](int64_t c) { f(chunks[static_cast<size_t>(c)]); });
}

// update(ptrs..., i) for i in [begin, end), one vector pass. The update is copied into a local
// first, for the reason parallel_for's comment gives (cpu_backend.h): its constants stay in registers.
template <typename U, typename... Ptrs>
void update_range(const U& update, int64_t begin, int64_t end, Ptrs... ptrs) {
  const U u = update;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) u(ptrs..., i);
}

// The element pointer of t (nullptr when undefined: SGD without momentum buffers).
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void CpuBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SGDConfig& cfg) {
  if (HalfStaging::needed({&param, &grad, &momentum_buffer})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    sgd_step(s.inout(param), s.in(grad), s.inout(momentum_buffer), cfg);
    return s.commit();
  }
  dispatch_floating(param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = data_or_null<T>(momentum_buffer);
    const int64_t n = param.numel();
    with_sgd_update<T>(cfg, cfg.momentum != 0.0 && buf != nullptr,
                       [&](auto update) { parallel_for(n, [=](int64_t i) { update(p, g, buf, i); }); });
  });
}

void CpuBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                           const AdamConfig& cfg) {
  // float32 math for 16-bit tensors (half_staging.h)
  if (HalfStaging::needed({&param, &grad, &exp_avg, &exp_avg_sq})) {
    HalfStaging s;
    adam_step(s.inout(param), s.in(grad), s.inout(exp_avg), s.inout(exp_avg_sq), cfg);
    return s.commit();
  }
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T *m = exp_avg.data<T>(), *v = exp_avg_sq.data<T>();
    const int64_t n = param.numel();
    with_adam_update<T>(cfg, [&](auto update) { parallel_for(n, [=](int64_t i) { update(p, g, m, v, i); }); });
  });
}

void CpuBackend::sgd_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                               std::vector<Tensor>& momentum_buffers, const SGDConfig& cfg) {
  if (HalfStaging::needed(params) || HalfStaging::needed(grads) ||
      HalfStaging::needed(momentum_buffers)) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    const std::vector<Tensor> staged_grads = s.in(grads);
    sgd_step_many(s.inout(params), staged_grads, s.inout(momentum_buffers), cfg);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(grads.size() == params.size() && momentum_buffers.size() == params.size());
  if (params.empty()) return;
  // The buffers are all defined or all undefined (backend.h), so one case serves the whole list.
  const bool has_buffers = momentum_buffers[0].defined();
  for ([[maybe_unused]] const Tensor& b : momentum_buffers) MINIDL_INTERNAL_ASSERT(b.defined() == has_buffers);
  dispatch_floating(params[0].dtype(), "sgd_step_many", [&](auto tag) {
    using T = decltype(tag);
    with_sgd_update<T>(cfg, cfg.momentum != 0.0 && has_buffers, [&](auto update) {
      for_each_chunk(params, [&](const TensorChunk& c) {
        update_range(update, c.begin, c.end, params[c.tensor].data<T>(), grads[c.tensor].data<T>(),
                     data_or_null<T>(momentum_buffers[c.tensor]));
      });
    });
  });
}

void CpuBackend::adam_step_many(std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                std::vector<Tensor>& exp_avgs, std::vector<Tensor>& exp_avg_sqs,
                                const AdamConfig& cfg) {
  if (HalfStaging::needed(params) || HalfStaging::needed(grads) || HalfStaging::needed(exp_avgs) ||
      HalfStaging::needed(exp_avg_sqs)) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    const std::vector<Tensor> staged_grads = s.in(grads);
    adam_step_many(s.inout(params), staged_grads, s.inout(exp_avgs), s.inout(exp_avg_sqs), cfg);
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                         exp_avg_sqs.size() == params.size());
  if (params.empty()) return;
  dispatch_floating(params[0].dtype(), "adam_step_many", [&](auto tag) {
    using T = decltype(tag);
    with_adam_update<T>(cfg, [&](auto update) {  // one step count for the whole list (backend.h)
      for_each_chunk(params, [&](const TensorChunk& c) {
        update_range(update, c.begin, c.end, params[c.tensor].data<T>(), grads[c.tensor].data<T>(),
                     exp_avgs[c.tensor].data<T>(), exp_avg_sqs[c.tensor].data<T>());
      });
    });
  });
}

}  // namespace minidl::cpu
