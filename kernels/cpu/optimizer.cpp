// CPU fused optimizer updates, one pass over each parameter (PyTorch's update rules):
//   SGD:  g = grad + wd·p;  buf = first ? g : μ·buf + (1-τ)·g;  g = nesterov ? g + μ·buf : buf;
//         p -= lr·g
//   Adam: g = grad (+ wd·p, or AdamW: p *= 1 - lr·wd);  m = β1·m + (1-β1)·g;
//         v = β2·v + (1-β2)·g²;  p -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

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
    T* buf = momentum_buffer.defined() ? momentum_buffer.data<T>() : nullptr;
    const T lr = static_cast<T>(cfg.lr), mu = static_cast<T>(cfg.momentum), wd = static_cast<T>(cfg.weight_decay);
    const T damp = static_cast<T>(1.0 - cfg.dampening);
    const bool use_momentum = cfg.momentum != 0.0 && buf != nullptr;
    const int64_t n = param.numel();
    // One loop per case, so that no branch is left inside (each loop is one vector pass);
    // the arithmetic per element is the rule above, in the same order in every case.
    if (!use_momentum) {
      parallel_for(n, [=](int64_t i) { p[i] -= lr * (g[i] + wd * p[i]); });
    } else if (cfg.first_step) {
      if (cfg.nesterov) {
        parallel_for(n, [=](int64_t i) {
          const T d = g[i] + wd * p[i];
          buf[i] = d;
          p[i] -= lr * (d + mu * d);
        });
      } else {
        parallel_for(n, [=](int64_t i) {
          const T d = g[i] + wd * p[i];
          buf[i] = d;
          p[i] -= lr * d;
        });
      }
    } else if (cfg.nesterov) {
      parallel_for(n, [=](int64_t i) {
        const T d = g[i] + wd * p[i];
        const T b = mu * buf[i] + damp * d;
        buf[i] = b;
        p[i] -= lr * (d + mu * b);
      });
    } else {
      parallel_for(n, [=](int64_t i) {
        const T d = g[i] + wd * p[i];
        const T b = mu * buf[i] + damp * d;
        buf[i] = b;
        p[i] -= lr * b;
      });
    }
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
    // Every scalar constant is computed in double and rounded to T once, as PyTorch does with its
    // Python floats: 1 - beta2 rounded from float32(beta2) would be 0.00099998713, not 0.001,
    // and every float32 step would be 6.4e-6 of itself too large.
    const double t = static_cast<double>(cfg.step);
    const T b1 = static_cast<T>(cfg.beta1), b2 = static_cast<T>(cfg.beta2);
    const T one_minus_b1 = static_cast<T>(1.0 - cfg.beta1), one_minus_b2 = static_cast<T>(1.0 - cfg.beta2);
    const T step_size = static_cast<T>(cfg.lr / (1.0 - std::pow(cfg.beta1, t)));  // lr / (1 - β1^t)
    const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(cfg.beta2, t)));
    const T eps = static_cast<T>(cfg.eps), wd = static_cast<T>(cfg.weight_decay);
    const T decay = static_cast<T>(1.0 - cfg.lr * cfg.weight_decay);
    const bool decoupled = cfg.decoupled_weight_decay;
    const int64_t n = param.numel();
    parallel_for(n, [=](int64_t i) {
      T gi = g[i];
      if (decoupled) p[i] *= decay;
      else gi += wd * p[i];
      m[i] = b1 * m[i] + one_minus_b1 * gi;
      v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
      // PyTorch's form: p -= (lr / bc1) · m / (sqrt(v) / sqrt(bc2) + eps)
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    });
  });
}

}  // namespace minidl::cpu
