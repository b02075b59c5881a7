// CPU masking kernels, elementwise in T (float, double, and int64 for masked_fill):
//   triangle:    y[i, r, c] = x[i, r, c] if (c − r <= diagonal) (tril) or (c − r >= diagonal)
//                (triu), else 0, over x, y [batch, R, C]
//   masked_fill: y[j] = mask[j] != 0 ? value : x[j], x, mask, y of one shape and dtype; the mask
//                may be a broadcast view (stride 0 along the dims it repeats over), read in place
// Both are their own gradient's kernel: the gradient of tril is tril of the gradient, and that of
// masked_fill is masked_fill of the gradient with 0 (core/ops/mask.cpp).
#include "kernels/cpu/cpu_backend.h"

namespace minidl::cpu {

void CpuBackend::triangle(const Tensor& x, Tensor& y, int64_t diagonal, bool upper) {
  MINIDL_INTERNAL_ASSERT(x.dim() == 3 && x.shape() == y.shape() && x.is_contiguous() && y.is_contiguous(),
                         "x ", x.shape(), ", y ", y.shape());
  const int64_t rows = x.shape()[1], cols = x.shape()[2];
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    // One matrix row at a time: the kept columns are one run [begin, end) of it.
    parallel_rows(x.shape()[0] * rows, x.numel(), [=](int64_t row) {
      const int64_t r = row % rows;
      const T* xr = px + row * cols;
      T* yr = py + row * cols;
      // tril keeps c <= r + diagonal; triu keeps c >= r + diagonal.
      const int64_t edge = r + diagonal;
      const int64_t begin = upper ? std::clamp<int64_t>(edge, 0, cols) : 0;
      const int64_t end = upper ? cols : std::clamp<int64_t>(edge + 1, 0, cols);
      for (int64_t c = 0; c < cols; ++c) yr[c] = c >= begin && c < end ? xr[c] : T(0);
    });
  });
}

void CpuBackend::masked_fill(const Tensor& x, const Tensor& mask, double value, Tensor& y) {
  MINIDL_INTERNAL_ASSERT(x.shape() == mask.shape() && x.shape() == y.shape() && x.dtype() == mask.dtype() &&
                             x.is_contiguous() && y.is_contiguous(),
                         "x ", x.shape(), ", mask ", mask.shape(), " ", mask.dtype(), ", y ", y.shape());
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pm = mask.data<T>();
    T* py = y.data<T>();
    const T fill = static_cast<T>(value);
    if (mask.is_contiguous()) {
      parallel_for(x.numel(), [=](int64_t i) { py[i] = pm[i] != T(0) ? fill : px[i]; });
      return;
    }
    // A broadcast mask: one row of the last dim at a time, the row's mask offset unravelled
    // from its index over the outer dims (strides 0 where the mask is broadcast).
    const int rank = x.dim();
    const Shape shape = x.shape(), strides = mask.strides();
    const int64_t cols = shape[rank - 1], col_stride = strides[rank - 1];
    parallel_rows(x.numel() / cols, x.numel(), [=](int64_t row) {
      int64_t offset = 0, rest = row;
      for (int d = rank - 2; d >= 0; --d) {
        offset += (rest % shape[d]) * strides[d];
        rest /= shape[d];
      }
      const T* xr = px + row * cols;
      T* yr = py + row * cols;
      for (int64_t c = 0; c < cols; ++c) yr[c] = pm[offset + c * col_stride] != T(0) ? fill : xr[c];
    });
  });
}

}  // namespace minidl::cpu
