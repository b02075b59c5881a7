// CPU multi-tensor kernels: one pass over a list of tensors (the gradients of clip_grad_norm_).
//   multi_tensor_norm:  out = (Σ_tensors Σ_i |x_i|^p)^(1/p), or max |x_i| for p = inf
//   multi_tensor_clip:  x_i *= min(max_norm / (norm + 1e-6), 1) for every element of every tensor, in place
// Strategy: the tensors are cut into chunks (kernels/cpu/tensor_chunks.h), the chunks are the
// parallel tasks, each task reduces its chunk in double into its own slot, and the slots are
// combined in chunk order on the calling thread: a fixed order, so the same bits every run
// whatever the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/tensor_chunks.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

// max(a, b) that keeps a NaN (std::max may drop one): the norm of a NaN gradient is NaN, as in PyTorch.
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b); }

}  // namespace

void CpuBackend::multi_tensor_norm(const std::vector<Tensor>& tensors, double p, Tensor& out) {
  if (HalfStaging::needed(tensors) || HalfStaging::needed({&out})) {  // float32 math (half_staging.h)
    HalfStaging s;
    multi_tensor_norm(s.in(tensors), p, s.out(out));
    return s.commit();
  }
  MINIDL_INTERNAL_ASSERT(!tensors.empty() && p > 0.0);
  dispatch_floating(out.dtype(), "multi_tensor_norm", [&](auto tag) {
    using T = decltype(tag);
    const std::vector<TensorChunk> chunks = chunks_of(tensors);
    const bool is_max = std::isinf(p);
    std::vector<double> partial(chunks.size(), 0.0);  // one slot per chunk
    parallel_rows(static_cast<int64_t>(chunks.size()), total_numel(tensors), [&](int64_t c) {
      const TensorChunk& ch = chunks[static_cast<size_t>(c)];
      const T* x = tensors[ch.tensor].data<T>();
      double acc = 0.0;
      if (is_max) {
        for (int64_t i = ch.begin; i < ch.end; ++i) acc = nan_max(acc, std::abs(static_cast<double>(x[i])));
      } else if (p == 2.0) {
        for (int64_t i = ch.begin; i < ch.end; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
      } else if (p == 1.0) {
        for (int64_t i = ch.begin; i < ch.end; ++i) acc += std::abs(static_cast<double>(x[i]));
      } else {
        for (int64_t i = ch.begin; i < ch.end; ++i) acc += std::pow(std::abs(static_cast<double>(x[i])), p);
      }
      partial[static_cast<size_t>(c)] = acc;
    });
    double total = 0.0;
    for (double v : partial) total = is_max ? nan_max(total, v) : total + v;
    const double norm = is_max ? total : p == 1.0 ? total : p == 2.0 ? std::sqrt(total) : std::pow(total, 1.0 / p);
    out.data<T>()[0] = static_cast<T>(norm);
  });
}

void CpuBackend::multi_tensor_clip(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm) {
  if (HalfStaging::needed(tensors) || HalfStaging::needed({&total_norm})) {  // float32 math (half_staging.h)
    HalfStaging s;
    std::vector<Tensor> targets = tensors;  // handles: rounding into them writes the callers' tensors
    multi_tensor_clip(s.inout(targets), s.in(total_norm), max_norm);
    return s.commit();
  }
  dispatch_floating(total_norm.dtype(), "multi_tensor_clip", [&](auto tag) {
    using T = decltype(tag);
    const std::vector<TensorChunk> chunks = chunks_of(tensors);
    const T coef = static_cast<T>(max_norm) / (total_norm.data<T>()[0] + static_cast<T>(1e-6));
    const T s = coef > T(1) ? T(1) : coef;  // NaN fails the test and stays
    parallel_rows(static_cast<int64_t>(chunks.size()), total_numel(tensors), [&](int64_t c) {
      const TensorChunk& ch = chunks[static_cast<size_t>(c)];
      T* x = tensors[ch.tensor].data<T>();
      for (int64_t i = ch.begin; i < ch.end; ++i) x[i] *= s;
    });
  });
}

// One pass per tensor: multiply, and note whether the element was finite before the multiply
// (as torch does). After many backoffs the scale can fall below 1 (inv_scale > 1), and a finite
// gradient may then overflow in the multiply without being flagged, as in torch.
void CpuBackend::unscale_and_check_finite(const std::vector<Tensor>& tensors, float inv_scale, Tensor& found_inf) {
  bool any_bad = false;
  for (const Tensor& t : tensors) {
    dispatch_floating_and_half(t.dtype(), "unscale", [&](auto tag) {
      using T = decltype(tag);
      using C = compute_t<T>;
      T* x = const_cast<Tensor&>(t).data<T>();
      const int64_t n = t.numel();
      bool bad = false;
      for (int64_t i = 0; i < n; ++i) {
        const C v = x[i];
        bad = bad || !std::isfinite(v);
        x[i] = static_cast<T>(v * static_cast<C>(inv_scale));
      }
      any_bad = any_bad || bad;
    });
  }
  if (any_bad) found_inf.data<float>()[0] = 1.0f;
}

}  // namespace minidl::cpu
