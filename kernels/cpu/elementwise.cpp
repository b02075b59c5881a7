// CPU elementwise kernels.
//   binary: out[i] = a[i] op b[i] over out's shape; a and b may be strided/broadcast views.
//   Fast paths: both contiguous (one vectorisable loop), and b a broadcast row ([N, C] op [C]).
//   relu: y = max(x, 0); relu_backward: dx = dy · [y > 0]; equal: out = (a == b) as 0/1 floats.
//   16-bit elements are read as float, combined in float and rounded once on store (the op
//   lambdas of a bfloat16 or float16 pair return float: core/half.h).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/strided.h"

namespace minidl::cpu {

namespace {

template <typename T, typename Op>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const int64_t n = out.numel();
  const bool a_contig = a.is_contiguous(), b_contig = b.is_contiguous();
  if (a_contig && b_contig) {
    parallel_for(n, [=](int64_t i) { po[i] = static_cast<T>(op(pa[i], pb[i])); });
    return;
  }
  const int rank = out.dim();
  if (a_contig && rank >= 1 && b.strides()[rank - 1] == 1) {
    // b broadcast along every dim but the last (e.g. bias row [C] over [N, C]).
    bool row = true;
    for (int d = 0; d + 1 < rank; ++d) row = row && b.strides()[d] == 0;
    if (row) {
      const int64_t cols = out.shape()[rank - 1], rows = n / cols;
      for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) po[r * cols + c] = static_cast<T>(op(pa[r * cols + c], pb[c]));
      return;
    }
  }
  if (a_contig && b.numel() > 0) {
    bool scalar = true;
    for (int d = 0; d < rank; ++d) scalar = scalar && b.strides()[d] == 0;
    if (scalar) {
      const T s = pb[0];
      parallel_for(n, [=](int64_t i) { po[i] = static_cast<T>(op(pa[i], s)); });
      return;
    }
  }
  for_each_strided(out.shape(), a.strides(), b.strides(),
                   [&](int64_t i, int64_t oa, int64_t ob) { po[i] = static_cast<T>(op(pa[oa], pb[ob])); });
}

}  // namespace

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_all(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::Add: binary_loop<T>(a, b, out, [](T x, T y) { return x + y; }); break;
      case BinaryOp::Sub: binary_loop<T>(a, b, out, [](T x, T y) { return x - y; }); break;
      case BinaryOp::Mul: binary_loop<T>(a, b, out, [](T x, T y) { return x * y; }); break;
      case BinaryOp::Div:
        if constexpr (std::is_same_v<T, int64_t>) {
          // Integer division by zero is undefined in C++: refuse it before dividing, so the
          // parallel loop itself never has to stop half way.
          bool zero = false;
          const T* pb = static_cast<const T*>(b.raw_data());
          for_each_strided(out.shape(), b.strides(), b.strides(),
                           [&](int64_t, int64_t ob, int64_t) { zero = zero || pb[ob] == 0; });
          MINIDL_CHECK(!zero, "div: integer division by zero (divisor of shape ", b.shape(), " holds a 0)");
          binary_loop<T>(a, b, out, [](T x, T y) { return x / y; });
        } else {
          binary_loop<T>(a, b, out, [](T x, T y) { return x / y; });
        }
        break;
    }
  });
}

void CpuBackend::relu_forward(const Tensor& x, Tensor& y) {
  dispatch_floating_and_half(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t n = x.numel();
    parallel_for(n, [&](int64_t i) { py[i] = px[i] > T(0) ? px[i] : T(0); });
  });
}

void CpuBackend::relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  dispatch_floating_and_half(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = dy.data<T>();
    const T* py = y.data<T>();
    T* pdx = dx.data<T>();
    const int64_t n = y.numel();
    // Both operands are loaded unconditionally, so the select is a vector blend: written as
    // `py[i] > 0 ? pdy[i] : 0`, the load of pdy[i] sits behind a branch that the compiler keeps,
    // and on a CNN's activations (half positive, in no pattern) that branch is mispredicted
    // half the time — 5.4 ms instead of 0.4-0.8 for a [64, 32, 28, 28] tensor on one Xeon VM. A
    // select, not dy · [y > 0]: a NaN or infinite dy where y <= 0 gives 0, as in PyTorch.
    parallel_for(n, [&](int64_t i) {
      const T d = pdy[i];
      pdx[i] = py[i] > T(0) ? d : T(0);
    });
  });
}

void CpuBackend::equal(const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a.raw_data());
    const T* pb = static_cast<const T*>(b.raw_data());
    float* po = out.data<float>();
    for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] == pb[i] ? 1.0f : 0.0f;
  });
}

}  // namespace minidl::cpu
