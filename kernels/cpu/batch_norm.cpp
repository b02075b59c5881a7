// CPU batch normalisation over x viewed as [N, C, S] (S = H·W, or 1 for [N, C] input).
//   training: mean_c = Σ_(n,s) x / M,  var_c = Σ (x − mean_c)² / M  with M = N·S (biased);
//             running_mean ← (1 − m)·running_mean + m·mean_c
//             running_var  ← (1 − m)·running_var  + m·var_c·M/(M − 1)   (unbiased, as PyTorch)
//   eval:     mean_c, var_c = running_mean, running_var
//   y = (x − mean_c)·invstd_c·γ_c + β_c,  invstd_c = 1/sqrt(var_c + eps)
// Backward, with x̂ = (x − mean)·invstd:  dβ = Σ dy,  dγ = Σ dy·x̂, and
//   training: dx = γ·invstd/M · (M·dy − dβ − x̂·dγ)   (the batch statistics depend on x)
//   eval:     dx = γ·invstd·dy
// Strategy: channel statistics are one task per channel (two passes over its N planes:
// mean, then the centred sum of squares — stabler than E[x²] − E[x]²), accumulated in double
// in a fixed order. The elementwise passes are one task per (n, c) plane. Everything here is
// bandwidth-bound: 2 reads + 1 write of x forward, 3 reads + 1 write backward.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

struct Layout {
  int64_t n, c, s;
};
Layout layout_of(const Tensor& x) {
  int64_t s = 1;
  for (int d = 2; d < x.dim(); ++d) s *= x.shape()[d];
  return {x.shape()[0], x.shape()[1], s};
}

}  // namespace

void CpuBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                                    Tensor& running_var, bool training, double momentum, double eps, Tensor& y,
                                    Tensor& save_mean, Tensor& save_invstd) {
  // float32 math for 16-bit tensors (half_staging.h)
  if (HalfStaging::needed({&x, &weight, &bias, &running_mean, &running_var, &y, &save_mean, &save_invstd})) {
    HalfStaging s;
    batch_norm_forward(s.in(x), s.in(weight), s.in(bias), s.inout(running_mean), s.inout(running_var), training,
                       momentum, eps, s.out(y), s.out(save_mean), s.out(save_invstd));
    return s.commit();
  }
  dispatch_floating(x.dtype(), "batch_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    const Layout layout = layout_of(x);
    const int64_t N = layout.n, C = layout.c, S = layout.s;  // plain variables: clang 14 cannot capture bindings
    const T* px = x.data<T>();
    T* mean = save_mean.data<T>();
    T* invstd = save_invstd.data<T>();
    if (training) {
      T* rm = running_mean.defined() ? running_mean.data<T>() : nullptr;
      T* rv = running_var.defined() ? running_var.data<T>() : nullptr;
      const double M = static_cast<double>(N * S);
      parallel_rows(C, 2 * N * C * S, [&](int64_t c) {
        double sum = 0;
        for (int64_t n = 0; n < N; ++n) {
          const T* plane = px + (n * C + c) * S;
          for (int64_t s = 0; s < S; ++s) sum += plane[s];
        }
        const double mu = sum / M;
        double sq = 0;
        for (int64_t n = 0; n < N; ++n) {
          const T* plane = px + (n * C + c) * S;
          for (int64_t s = 0; s < S; ++s) {
            const double d = plane[s] - mu;
            sq += d * d;
          }
        }
        const double var = sq / M;
        mean[c] = static_cast<T>(mu);
        invstd[c] = static_cast<T>(1.0 / std::sqrt(var + eps));
        if (rm) rm[c] = static_cast<T>((1 - momentum) * rm[c] + momentum * mu);
        if (rv) rv[c] = static_cast<T>((1 - momentum) * rv[c] + momentum * var * M / (M - 1));
      });
    } else {
      const T* rm = running_mean.data<T>();
      const T* rv = running_var.data<T>();
      for (int64_t c = 0; c < C; ++c) {
        mean[c] = rm[c];
        invstd[c] = static_cast<T>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
      }
    }
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = y.data<T>();
    parallel_rows(N * C, N * C * S, [&](int64_t nc) {
      const int64_t c = nc % C;
      const T scale = invstd[c] * (pw ? pw[c] : T(1));
      const T shift = (pb ? pb[c] : T(0)) - mean[c] * scale;
      const T* in = px + nc * S;
      T* out = py + nc * S;
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) out[s] = in[s] * scale + shift;
    });
  });
}

void CpuBackend::batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                     const Tensor& save_invstd, bool training, Tensor& dx, Tensor& dweight,
                                     Tensor& dbias) {
  // float32 math for 16-bit tensors (half_staging.h)
  if (HalfStaging::needed({&dy, &x, &weight, &save_mean, &save_invstd, &dx, &dweight, &dbias})) {
    HalfStaging s;
    batch_norm_backward(s.in(dy), s.in(x), s.in(weight), s.in(save_mean), s.in(save_invstd), training, s.out(dx),
                        s.out(dweight), s.out(dbias));
    return s.commit();
  }
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const Layout layout = layout_of(x);
    const int64_t N = layout.n, C = layout.c, S = layout.s;  // plain variables: clang 14 cannot capture bindings
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const T* mean = save_mean.data<T>();
    const T* invstd = save_invstd.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    // Per channel: Σ dy and Σ dy·x̂ (needed by dγ, dβ and the training dx).
    std::vector<double> sum_dy(static_cast<size_t>(C)), sum_dy_xhat(static_cast<size_t>(C));
    parallel_rows(C, N * C * S, [&](int64_t c) {
      double a = 0, b = 0;
      const double mu = mean[c];
      for (int64_t n = 0; n < N; ++n) {
        const T* g = pdy + (n * C + c) * S;
        const T* in = px + (n * C + c) * S;
        for (int64_t s = 0; s < S; ++s) {
          a += g[s];
          b += g[s] * (in[s] - mu);
        }
      }
      sum_dy[static_cast<size_t>(c)] = a;
      sum_dy_xhat[static_cast<size_t>(c)] = b * invstd[c];
    });
    if (dbias.defined())
      for (int64_t c = 0; c < C; ++c) dbias.data<T>()[c] = static_cast<T>(sum_dy[static_cast<size_t>(c)]);
    if (dweight.defined())
      for (int64_t c = 0; c < C; ++c) dweight.data<T>()[c] = static_cast<T>(sum_dy_xhat[static_cast<size_t>(c)]);
    if (!dx.defined()) return;
    T* pdx = dx.data<T>();
    const double M = static_cast<double>(N * S);
    parallel_rows(N * C, N * C * S, [&](int64_t nc) {
      const int64_t c = nc % C;
      const T* g = pdy + nc * S;
      const T* in = px + nc * S;
      T* out = pdx + nc * S;
      const T k = invstd[c] * (pw ? pw[c] : T(1));  // γ·invstd
      if (!training) {
#pragma omp simd
        for (int64_t s = 0; s < S; ++s) out[s] = k * g[s];
        return;
      }
      // dx = k·(dy − dβ/M − x̂·dγ/M) with x̂ = (x − mean)·invstd
      const T mu = mean[c], is = invstd[c];
      const T mean_dy = static_cast<T>(sum_dy[static_cast<size_t>(c)] / M);
      const T mean_dy_xhat = static_cast<T>(sum_dy_xhat[static_cast<size_t>(c)] / M);
#pragma omp simd
      for (int64_t s = 0; s < S; ++s) out[s] = k * (g[s] - mean_dy - (in[s] - mu) * is * mean_dy_xhat);
    });
  });
}

}  // namespace minidl::cpu
