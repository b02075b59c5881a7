// CPU softmax family over rows of [rows, cols], in the expressions of the CUDA backend
// (kernels/cuda/softmax.cu, cross_entropy.cu), m = max_j x_j and s = Σ_j exp(x_j - m):
//   log_softmax: y = (x - m) - log s
//   softmax:     y = exp(x - m) · (1/s)
//   cross-entropy forward: one pass per row computes m and s with an online rescaling (no
//   probability tensor is ever written); loss = log s - (x[target] - m); stats[row] = (m, 1/s).
//   backward: dlogits = (exp(x - m) · (1/s) - onehot(target)) · scale[row], from the stats.
//   With label smoothing ε the loss adds ε·(log s - Σ_j (x_j - m) / C) to (1 - ε)·nll and the
//   gradient subtracts (1 - ε)·onehot + ε/C instead of onehot; a row whose target is
//   ignore_index has loss 0 and gradient 0 (core/backend.h states the contract).
// lse = m + log s is never formed: Note [softmax at the logits' scale] in core/ops/softmax.cpp.
// s is summed in double for float32 rows too: a long float32 sum of similar terms (a row of
// 1000 logits within a few units of each other) would add ~sqrt(cols) ulps of rounding to every
// p and log p; summed in double, s is as exact as its terms.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

// The log-sum-exp of a row in its two parts, lse = m + log s: m the row's max, s = Σ exp(x - m)
// (each exp in T, the sum in double).
template <typename T>
struct RowLse {
  T m;
  double s;
};

// Online max + sum of exps of one row (Milakov & Gimelshein's running rescale). An element
// equal to the running max adds exactly 1, so equal infinities never meet in exp(inf - inf):
// a masked row such as [-inf, -inf, 0] gives m = 0, s = 1 (not NaN), an all -inf row gives
// m = -inf, s = cols, as the CUDA kernels do (kernels/cuda/row_engine.cuh).
template <typename T>
RowLse<T> row_logsumexp(const T* row, int64_t cols) {
  T m = row[0];
  double s = 1.0;
  for (int64_t j = 1; j < cols; ++j) {
    const T v = row[j];
    if (v > m) {
      s = s * static_cast<double>(std::exp(m - v)) + 1.0;
      m = v;
    } else {
      s += v == m ? 1.0 : static_cast<double>(std::exp(v - m));
    }
  }
  return {m, s};
}

template <typename F>
void for_rows(const Tensor& x, F&& f) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  parallel_rows(rows, rows * cols, [&](int64_t r) { f(r, cols); });
}

}  // namespace

void CpuBackend::log_softmax_forward(const Tensor& x, Tensor& y) {
  if (HalfStaging::needed({&x, &y})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    log_softmax_forward(s.in(x), s.out(y));
    return s.commit();
  }
  dispatch_floating(x.dtype(), "log_softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_rows(x, [&](int64_t r, int64_t cols) {
      const RowLse<T> st = row_logsumexp(px + r * cols, cols);
      const T log_s = static_cast<T>(std::log(st.s));
      for (int64_t j = 0; j < cols; ++j) py[r * cols + j] = (px[r * cols + j] - st.m) - log_s;
    });
  });
}

void CpuBackend::log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  if (HalfStaging::needed({&dy, &y, &dx})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    log_softmax_backward(s.in(dy), s.in(y), s.out(dx));
    return s.commit();
  }
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
  if (HalfStaging::needed({&x, &y})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    softmax_forward(s.in(x), s.out(y));
    return s.commit();
  }
  dispatch_floating(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_rows(x, [&](int64_t r, int64_t cols) {
      const RowLse<T> st = row_logsumexp(px + r * cols, cols);
      const T inv_s = static_cast<T>(1.0 / st.s);
      for (int64_t j = 0; j < cols; ++j) py[r * cols + j] = std::exp(px[r * cols + j] - st.m) * inv_s;
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  if (HalfStaging::needed({&dy, &y, &dx})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    softmax_backward(s.in(dy), s.in(y), s.out(dx));
    return s.commit();
  }
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

std::optional<std::pair<int64_t, int64_t>> CpuBackend::find_invalid_target(const Tensor& targets, int64_t num_classes,
                                                                           std::optional<int64_t> ignore_index) {
  const int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0; i < targets.numel(); ++i)
    if ((t[i] < 0 || t[i] >= num_classes) && t[i] != ignore_index) return std::make_pair(i, t[i]);
  return std::nullopt;
}

namespace {

// What a row's target makes of the gradient (p - q)·scale, q = (1 - ε)·onehot(t) + ε/C:
// d_j = p_j·scale - class_w, and d_t -= target_w. With ε = 0, class_w = 0 and target_w = scale,
// the bits of the unsmoothed (p·scale) - scale.
template <typename T>
struct CeWeights {
  T target_w, class_w;
};

template <typename T>
CeWeights<T> ce_weights(T scale, const CrossEntropyOptions& o, int64_t cols) {
  const double eps = o.label_smoothing;
  return {static_cast<T>((1.0 - eps) * scale), static_cast<T>(eps / static_cast<double>(cols) * scale)};
}

// The row's loss from its statistics: (1 - ε)·nll + ε·smooth with nll = log s - (x_t - m) and
// smooth = log s - Σ_j (x_j - m) / C (the mean of -log p_j; the sum over x - m in double, so no
// error at the logits' scale enters it). ε = 0 gives nll itself, also for rows where smooth is inf.
template <typename T>
T ce_loss(const T* row, int64_t cols, int64_t target, const RowLse<T>& st, double eps) {
  const T log_s = static_cast<T>(std::log(st.s));
  const T nll = log_s - (row[target] - st.m);
  if (eps == 0.0) return nll;
  double shifted = 0.0;
  for (int64_t j = 0; j < cols; ++j) shifted += static_cast<double>(row[j] - st.m);
  const T smooth = log_s - static_cast<T>(shifted / static_cast<double>(cols));
  return static_cast<T>(1.0 - eps) * nll + static_cast<T>(eps) * smooth;
}

}  // namespace

void CpuBackend::softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& loss,
                                               Tensor& stats, const CrossEntropyOptions& o) {
  if (HalfStaging::needed({&logits, &loss, &stats})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    softmax_cross_entropy_forward(s.in(logits), targets, s.out(loss), s.out(stats), o);
    return s.commit();
  }
  dispatch_floating(logits.dtype(), "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T *pl = loss.data<T>(), *pstats = stats.data<T>();  // stats [rows, 2]: (m, 1/s)
    for_rows(logits, [&](int64_t r, int64_t cols) {
      if (pt[r] == o.ignore_index) {  // backward writes 0 for this row without reading its stats
        pl[r] = T(0);
        pstats[2 * r] = T(0);
        pstats[2 * r + 1] = T(1);
        return;
      }
      const RowLse<T> st = row_logsumexp(px + r * cols, cols);
      pstats[2 * r] = st.m;
      pstats[2 * r + 1] = static_cast<T>(1.0 / st.s);
      pl[r] = ce_loss(px + r * cols, cols, pt[r], st, o.label_smoothing);
    });
  });
}

void CpuBackend::softmax_cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& stats,
                                                const Tensor& scale, Tensor& dlogits, const CrossEntropyOptions& o) {
  if (HalfStaging::needed({&logits, &stats, &scale, &dlogits})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    softmax_cross_entropy_backward(s.in(logits), targets, s.in(stats), s.in(scale), s.out(dlogits), o);
    return s.commit();
  }
  dispatch_floating(logits.dtype(), "softmax_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *px = logits.data<T>(), *pstats = stats.data<T>(), *ps = scale.data<T>();  // stats [rows, 2]: (m, 1/s)
    const int64_t* pt = targets.data<int64_t>();
    T* pd = dlogits.data<T>();
    const bool per_row = scale.numel() > 1 || (scale.numel() == 1 && logits.shape()[0] == 1 && scale.dim() == 1);
    for_rows(logits, [&](int64_t r, int64_t cols) {
      T* drow = pd + r * cols;
      if (pt[r] == o.ignore_index) {
        std::fill(drow, drow + cols, T(0));
        return;
      }
      const T s = per_row ? ps[r] : ps[0];
      const CeWeights<T> w = ce_weights(s, o, cols);
      const T m = pstats[2 * r], inv_s = pstats[2 * r + 1];
      for (int64_t j = 0; j < cols; ++j) drow[j] = std::exp(px[r * cols + j] - m) * inv_s * s - w.class_w;
      drow[pt[r]] -= w.target_w;
    });
  });
}

void CpuBackend::softmax_cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& scale,
                                             Tensor& loss, Tensor& dlogits, const CrossEntropyOptions& o) {
  if (HalfStaging::needed({&logits, &scale, &loss, &dlogits})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    softmax_cross_entropy_fused(s.in(logits), targets, s.in(scale), s.out(loss), s.out(dlogits), o);
    return s.commit();
  }
  dispatch_floating(logits.dtype(), "softmax_cross_entropy_fused", [&](auto tag) {
    using T = decltype(tag);
    const T* px = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T *pl = loss.data<T>(), *pd = dlogits.data<T>();
    const T s = scale.defined() ? scale.data<T>()[0] : T(1);
    // The second sweep re-reads a row the first one just brought into cache.
    for_rows(logits, [&](int64_t r, int64_t cols) {
      const T* row = px + r * cols;
      T* drow = pd + r * cols;
      if (pt[r] == o.ignore_index) {
        pl[r] = T(0);
        std::fill(drow, drow + cols, T(0));
        return;
      }
      const RowLse<T> st = row_logsumexp(row, cols);
      pl[r] = ce_loss(row, cols, pt[r], st, o.label_smoothing);
      const T inv_s = static_cast<T>(1.0 / st.s);
      const CeWeights<T> w = ce_weights(s, o, cols);
      for (int64_t j = 0; j < cols; ++j) drow[j] = std::exp(row[j] - st.m) * inv_s * s - w.class_w;
      drow[pt[r]] -= w.target_w;
    });
  });
}

void CpuBackend::cross_entropy_mean_scale(const Tensor& targets, int64_t ignore_index, Tensor& scale) {
  if (HalfStaging::needed({&scale})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    cross_entropy_mean_scale(targets, ignore_index, s.out(scale));
    return s.commit();
  }
  const int64_t* t = targets.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) count += t[i] != ignore_index;
  // 1/0 = +inf (IEEE): the mean of no losses becomes 0 · inf = NaN, as in PyTorch.
  const double inv = count > 0 ? 1.0 / static_cast<double>(count) : std::numeric_limits<double>::infinity();
  dispatch_floating(scale.dtype(), "cross_entropy_mean_scale",
                    [&](auto tag) { scale.data<decltype(tag)>()[0] = static_cast<decltype(tag)>(inv); });
}

}  // namespace minidl::cpu
