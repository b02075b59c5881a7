// CPU reductions.
//   sum_dim: x viewed as [outer, n, inner] -> out [outer, inner], summed over n in index
//   order (deterministic). Last-dim sums accumulate in double (long float32 rows stay accurate);
//   other dims accumulate whole rows in T, streaming through memory.
//   argmax_rows: first index of the maximum of each row of [rows, cols].
#include <algorithm>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {
template <typename T> struct Accum { using type = double; };
template <> struct Accum<int64_t> { using type = int64_t; };
}  // namespace

void CpuBackend::sum_dim(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  if (HalfStaging::needed({&x, &out})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    sum_dim(s.in(x), outer, n, inner, s.out(out));
    return s.commit();
  }
  dispatch_native(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    using A = typename Accum<T>::type;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    if (inner == 1) {
      parallel_rows(outer, outer * n, [&](int64_t o) {
        A acc = 0;
        const T* row = px + o * n;
        for (int64_t j = 0; j < n; ++j) acc += row[j];
        po[o] = static_cast<T>(acc);
      });
      return;
    }
    // Reducing a non-last dim: accumulate inner rows, streaming through memory. The tasks are
    // (o, a block of kColumns inner columns), so that a bias gradient (outer = 1: the column
    // sums of dy [rows, N]) runs on every thread instead of one; each element still adds its
    // n terms in index order, the same bits whatever the split. The lambda copies the sizes:
    // read through references they might alias dst as far as the compiler knows.
    constexpr int64_t kColumns = 64;
    const int64_t blocks = (inner + kColumns - 1) / kColumns;
    parallel_rows(outer * blocks, outer * n * inner, [=](int64_t task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * kColumns;
      const int64_t width = std::min(kColumns, inner - i0);
      T* dst = po + o * inner + i0;
      for (int64_t i = 0; i < width; ++i) dst[i] = T(0);
      for (int64_t j = 0; j < n; ++j) {
        const T* row = px + (o * n + j) * inner + i0;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) dst[i] += row[i];
      }
    });
  });
}

void CpuBackend::argmax_rows(const Tensor& x, Tensor& out) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  int64_t* po = out.data<int64_t>();
  dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.raw_data());
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = px + r * cols;
      int64_t best = 0;
      for (int64_t c = 1; c < cols; ++c)
        if (row[c] > row[best]) best = c;
      po[r] = best;
    }
  });
}

}  // namespace minidl::cpu
