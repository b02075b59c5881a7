// CPU embedding: weight [V, D], indices [N] int64.
//   forward:  out[i, :] = weight[idx[i], :]                        (one row copy per position)
//   backward: dweight = 0, then dweight[idx[i], :] += dy[i, :] for i = 0, 1, ..., N − 1
// The backward's additions run in position order for every element, in T: the order the
// backend contract fixes (core/backend.h), which kernels/cuda/embedding.cu reproduces, so both
// give the same bits. Tasks split the columns (blocks of 64), never the positions, so each
// element still sees its additions in order. The op layer has checked the indices (on the CPU
// at once, Backend::check_targets), so every index lies in [0, V).
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {
constexpr int64_t kColumnBlock = 64;  // columns per task of the backward
}  // namespace

void CpuBackend::embedding_forward(const Tensor& indices, const Tensor& weight, Tensor& out) {
  if (HalfStaging::needed({&weight, &out})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    embedding_forward(indices, s.in(weight), s.out(out));
    return s.commit();
  }
  dispatch_floating(weight.dtype(), "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = indices.numel(), V = weight.shape()[0], D = weight.shape()[1];
    const int64_t* idx = indices.data<int64_t>();
    const T* pw = weight.data<T>();
    T* po = out.data<T>();
    parallel_rows(n, n * D, [&](int64_t i) {
      MINIDL_INTERNAL_ASSERT(idx[i] >= 0 && idx[i] < V, "embedding_forward: index ", idx[i], " for V = ", V);
      std::memcpy(po + i * D, pw + idx[i] * D, static_cast<size_t>(D) * sizeof(T));
    });
  });
}

void CpuBackend::embedding_backward(const Tensor& dy, const Tensor& indices, Tensor& dweight) {
  if (HalfStaging::needed({&dy, &dweight})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    embedding_backward(s.in(dy), indices, s.out(dweight));
    return s.commit();
  }
  dispatch_floating(dweight.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = indices.numel(), V = dweight.shape()[0], D = dweight.shape()[1];
    const int64_t* idx = indices.data<int64_t>();
    const T* pdy = dy.data<T>();
    T* pdw = dweight.data<T>();
    const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
    parallel_rows(blocks, n * D + V * D, [&](int64_t blk) {
      const int64_t j0 = blk * kColumnBlock, width = std::min(kColumnBlock, D - j0);
      for (int64_t v = 0; v < V; ++v)
        for (int64_t j = 0; j < width; ++j) pdw[v * D + j0 + j] = T(0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = idx[i];
        MINIDL_INTERNAL_ASSERT(v >= 0 && v < V, "embedding_backward: index ", v, " for V = ", V);
        const T* g = pdy + i * D + j0;
        T* acc = pdw + v * D + j0;
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) acc[j] += g[j];
      }
    });
  });
}

}  // namespace minidl::cpu
