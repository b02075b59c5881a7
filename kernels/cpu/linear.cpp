// CPU matmul and linear, all through the one GEMM core (kernels/cpu/gemm.cpp):
//   matmul:   C = op(A)·op(B)        (transposes are strides, never copies)
//   batched:  C[i] = op(A[i])·op(B[i]) (operand i at a batch stride, 0 when broadcast); a batch
//             of small products (attention heads) is spread over the threads one product each,
//             a batch of large ones runs one product after another, each threaded by the GEMM
//   forward:  y[N,M] = x[N,K]·W[M,K]ᵀ + b     — B = Wᵀ read with strides (1, K); bias and
//             ReLU fused in the GEMM epilogue
//   backward: dx[N,K] = dy[N,M]·W[M,K];  dW[M,K] = dyᵀ·x;  db[M] = Σ_rows dy
// 16-bit operands: the GEMM reads them as they are (converting while it packs) and sums in
// float32. A 16-bit C is computed in float32 panels of whole rows (gemm_into, below), each
// rounded into C once the GEMM has summed all of K for it: no partial sum is ever rounded to 16
// bits. The batched product rounds a float32 copy of all of C at the end (HalfStaging::out).
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

// Strides of op(X) for a row-major [rows, cols] matrix X.
struct OpStrides {
  int64_t rs, cs;
};
OpStrides op_strides(const Tensor& x, bool trans) {
  const int64_t cols = x.shape()[1];
  return trans ? OpStrides{1, cols} : OpStrides{cols, 1};
}

// The float32 buffer of a 16-bit product holds about this much: a panel of rows of C.
// A float32 copy of all of C would be the largest temporary of a 16-bit training step — the
// char-GPT's c_fc output at batch 8 and context 256 is 2048 x 1024, 8 MiB in float32, alive at
// the step's memory peak — while a panel of 1 MiB stays in the L2 cache between the GEMM that
// writes it and the rounding that reads it.
constexpr int64_t kPanelBytes = int64_t{1} << 20;

// Runs g (its A, B, K, bias and ReLU set) into c, a contiguous [g.m, g.n] of T. float and double
// are written in place. A 16-bit C goes by panels of whole rows: the GEMM writes a panel in
// float32 and each element is rounded once into C. Every panel sees all of K, and the panels
// are of equal size (give or take a row), at least 32 rows once C needs more than one, so
// each is large enough for the blocked path whenever C as a whole is (gemm: more than 32³
// products; a panel has at least 2^17 / n · n · k of them). So C is what one float32 GEMM
// rounded at the end gives, bit for bit. A panel holds about kPanelBytes, and at least 64 rows
// of C before balancing: a C wider than 4096 columns takes more. B is packed again for each
// panel: K · N values against the panel's rows · N · K multiply-adds.
template <typename T>
void gemm_into(GemmArgs<compute_t<T>, T> g, T* c) {
  g.ldc = g.n;
  if constexpr (std::is_same_v<compute_t<T>, T>) {
    g.c = c;
    gemm(g);
  } else {
    const int64_t fit = kPanelBytes / static_cast<int64_t>(sizeof(float) * std::max<int64_t>(g.n, 1));
    const int64_t most = std::max<int64_t>(64, fit / 64 * 64);  // rows a panel may hold
    const int64_t panels = std::max<int64_t>(1, (g.m + most - 1) / most);
    const int64_t rows = (g.m + panels - 1) / panels;  // balanced: no small last panel
    const Tensor panel = empty(Shape{rows, g.n}, TensorOptions(DType::Float32, Device::cpu()));
    for (int64_t r0 = 0; r0 < g.m; r0 += rows) {
      GemmArgs<float, T> p = g;
      p.m = std::min(rows, g.m - r0);
      p.a = g.a + r0 * g.rs_a;
      p.c = panel.data<float>();
      gemm(p);
      T* dst = c + r0 * g.n;
      const int64_t count = p.m * g.n;
      for (int64_t i = 0; i < count; ++i) dst[i] = T(p.c[i]);
    }
  }
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) {
  dispatch_floating_and_half(c.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    GemmArgs<compute_t<T>, T> g;
    g.m = c.shape()[0];
    g.n = c.shape()[1];
    g.k = trans_a ? a.shape()[0] : a.shape()[1];
    const OpStrides sa = op_strides(a, trans_a), sb = op_strides(b, trans_b);
    g.a = a.data<T>();
    g.rs_a = sa.rs;
    g.cs_a = sa.cs;
    g.b = b.data<T>();
    g.rs_b = sb.rs;
    g.cs_b = sb.cs;
    gemm_into(g, c.data<T>());
  });
}

void CpuBackend::matmul_batched(const Tensor& a, const Tensor& b, Tensor& c, const BatchedMatmul& p) {
  MINIDL_INTERNAL_ASSERT(p.batch >= 1 && p.m >= 1 && p.n >= 1 && p.k >= 1 && c.is_contiguous(), "batch, M, N, K = ",
                         p.batch, ", ", p.m, ", ", p.n, ", ", p.k);
  dispatch_floating_and_half(c.dtype(), "matmul_batched", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    HalfStaging staging;
    GemmArgs<C, T> g;  // product 0; product i moves each pointer by i batch strides
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.rs_a = p.trans_a ? 1 : p.lda;  // op(A)[i, k] at A + i·rs_a + k·cs_a
    g.cs_a = p.trans_a ? p.lda : 1;
    g.rs_b = p.trans_b ? 1 : p.ldb;
    g.cs_b = p.trans_b ? p.ldb : 1;
    g.ldc = p.n;
    const T* a0 = a.data<T>();
    const T* b0 = b.data<T>();
    C* c0 = staging.out(c).template data<C>();
    auto product = [&](int64_t i) {
      GemmArgs<C, T> gi = g;
      gi.a = a0 + i * p.stride_a;
      gi.b = b0 + i * p.stride_b;
      gi.c = c0 + i * p.m * p.n;
      gemm(gi);
    };
    // A product this small runs on the calling thread inside gemm (gemm_blocked's threshold),
    // so the products can share the pool without nesting it; a larger one threads itself.
    const int64_t flops = p.m * p.n * p.k;
    if (p.batch == 1 || flops > (int64_t{1} << 18)) {
      for (int64_t i = 0; i < p.batch; ++i) product(i);
    } else {
      parallel_rows(p.batch, p.batch * flops, product);
    }
    staging.commit();
  });
}

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, Activation act,
                                Tensor* pre_activation) {
  dispatch_floating_and_half(y.dtype(), "linear_forward", [&](auto tag) {
    using T = decltype(tag);
    HalfStaging staging;  // a 16-bit bias is widened: the epilogue adds it in float32
    GemmArgs<compute_t<T>, T> g;
    g.m = x.shape()[0];
    g.k = x.shape()[1];
    g.n = w.shape()[0];
    g.a = x.data<T>();
    g.rs_a = g.k;
    g.cs_a = 1;
    g.b = w.data<T>();  // Wᵀ: element (k, j) = W[j, k]
    g.rs_b = 1;
    g.cs_b = g.k;
    g.bias = bias.defined() ? staging.in(bias).template data<compute_t<T>>() : nullptr;
    g.relu = act == Activation::ReLU;
    gemm_into(g, (is_gelu(act) ? *pre_activation : y).template data<T>());
  });
  // Note [GELU after the CPU GEMM, not in it]: GELU costs about 60 flops an element (two
  // exponentials and a division), so on the CPU it is bound by arithmetic, not by memory, and
  // fusing it into the GEMM saves only a read of z. Two fused forms were measured on the char-GPT's
  // c_fc layers (bench_gemm --gelu; bench/RESULTS.md, "GELU and the GEMM on the CPU"): the GELU of
  // each 8x32 tile as the micro-kernel stores it took 1.07-1.18x the time of the product followed
  // by a separate pass, and the GELU of row panels still in L2 0.89-1.08x; neither beat the
  // separate pass by more than this VM's noise between runs. So the product is written into z and
  // gelu_forward's pass (long vectorised loops, nothing else in flight) makes y from it, the bits
  // of gelu(linear(...)) by construction.
  if (is_gelu(act)) gelu_forward(*pre_activation, y, gelu_form(act));
}

void CpuBackend::linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                 Tensor& db) {
  if (dx.defined()) matmul(dy, w, dx, false, false);  // [N,M]·[M,K]
  if (dw.defined()) matmul(dy, x, dw, true, false);   // [M,N]·[N,K]
  if (db.defined()) sum_dim(dy, 1, dy.shape()[0], dy.shape()[1], db);
}

}  // namespace minidl::cpu
