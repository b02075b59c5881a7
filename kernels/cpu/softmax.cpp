// CPU softmax family over rows of [rows, cols].
//   log_softmax: y = x - m - log Σ exp(x - m), m = max(x) (max-subtracted: no overflow)
//   softmax:     y = exp(x - m) / Σ exp(x - m)
//   cross-entropy forward: one pass per row computes m and lse = m + log Σ exp(x - m) with an
//   online rescaling (no probability tensor is ever written); loss = lse - x[target].
//   backward: dlogits = (exp(x - lse) - onehot(target)) · scale[row].
#include <cmath>

#include "kernels/cpu/cpu_backend.h"

namespace minidl::cpu {

namespace {

// Online max + log-sum-exp of one row (Milakov & Gimelshein's running rescale). An element
// equal to the running max adds exactly 1, so equal infinities never meet in exp(inf - inf):
// a masked row such as [-inf, -inf, 0] gives lse 0 (not NaN), an all -inf row gives -inf, as
// the CUDA kernels do (kernels/cuda/softmax.cu).
template <typename T>
T row_logsumexp(const T* row, int64_t cols) {
  T m = row[0];
  T s = T(1);
  for (int64_t j = 1; j < cols; ++j) {
    const T v = row[j];
    if (v > m) {
      s = s * std::exp(m - v) + T(1);
      m = v;
    } else {
      s += v == m ? T(1) : std::exp(v - m);
    }
  }
  return m + std::log(s);
}

template <typename F>
void for_rows(const Tensor& x, F&& f) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  parallel_rows(rows, rows * cols, [&](int64_t r) { f(r, cols); });
}

}  // namespace

void CpuBackend::log_softmax_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_rows(x, [&](int64_t r, int64_t cols) {
      const T lse = row_logsumexp(px + r * cols, cols);
      for (int64_t j = 0; j < cols; ++j) py[r * cols + j] = px[r * cols + j] - lse;
    });
  });
}

void CpuBackend::log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  dispatch_floating(y.dtype(), "log_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *pdy = dy.data<T>(), *py = y.data<T>();
    T* pdx = dx.data<T>();
    for_rows(y, [&](int64_t r, int64_t cols) {
      T s = 0;
      for (int64_t j = 0; j < cols; ++j) s += pdy[r * cols + j];
      for (int64_t j = 0; j < cols; ++j) pdx[r * cols + j] = pdy[r * cols + j] - std::exp(py[r * cols + j]) * s;
    });
  });
}

void CpuBackend::softmax_forward(const Tensor& x, Tensor& y) {
  dispatch_floating(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_rows(x, [&](int64_t r, int64_t cols) {
      const T lse = row_logsumexp(px + r * cols, cols);
      for (int64_t j = 0; j < cols; ++j) py[r * cols + j] = std::exp(px[r * cols + j] - lse);
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *pdy = dy.data<T>(), *py = y.data<T>();
    T* pdx = dx.data<T>();
    for_rows(y, [&](int64_t r, int64_t cols) {
      T s = 0;
      for (int64_t j = 0; j < cols; ++j) s += pdy[r * cols + j] * py[r * cols + j];
      for (int64_t j = 0; j < cols; ++j) pdx[r * cols + j] = py[r * cols + j] * (pdy[r * cols + j] - s);
    });
  });
}

std::optional<std::pair<int64_t, int64_t>> CpuBackend::find_invalid_target(const Tensor& targets, int64_t num_classes) {
  const int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0; i < targets.numel(); ++i)
    if (t[i] < 0 || t[i] >= num_classes) return std::make_pair(i, t[i]);
  return std::nullopt;
}

void CpuBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) {
  dispatch_floating(logits.dtype(), "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T *pl = loss.data<T>(), *plse = lse.data<T>();
    for_rows(logits, [&](int64_t r, int64_t cols) {
      const T v = row_logsumexp(px + r * cols, cols);
      plse[r] = v;
      pl[r] = v - px[r * cols + pt[r]];
    });
  });
}

void CpuBackend::softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                                const Tensor& scale, Tensor& dlogits) {
  dispatch_floating(logits.dtype(), "softmax_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = logits.data<T>(), *plse = lse.data<T>(), *ps = scale.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T* pd = dlogits.data<T>();
    const bool per_row = scale.numel() > 1 || (scale.numel() == 1 && logits.shape()[0] == 1 && scale.dim() == 1);
    for_rows(logits, [&](int64_t r, int64_t cols) {
      const T s = per_row ? ps[r] : ps[0];
      for (int64_t j = 0; j < cols; ++j) pd[r * cols + j] = std::exp(px[r * cols + j] - plse[r]) * s;
      pd[r * cols + pt[r]] -= s;
    });
  });
}

void CpuBackend::softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, double scale, Tensor& loss,
                                             Tensor& dlogits) {
  dispatch_floating(logits.dtype(), "softmax_cross_entropy_fused", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T *pl = loss.data<T>(), *pd = dlogits.data<T>();
    const T s = static_cast<T>(scale);
    // The second sweep re-reads a row the first one just brought into cache.
    for_rows(logits, [&](int64_t r, int64_t cols) {
      const T* row = px + r * cols;
      const T lse = row_logsumexp(row, cols);
      pl[r] = lse - row[pt[r]];
      T* drow = pd + r * cols;
      for (int64_t j = 0; j < cols; ++j) drow[j] = std::exp(row[j] - lse) * s;
      drow[pt[r]] -= s;
    });
  });
}

}  // namespace minidl::cpu
