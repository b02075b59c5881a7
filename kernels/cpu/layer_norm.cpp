// CPU layer normalisation over the rows of x [rows, D].
//   forward:  mean_r = Σ_j x_rj / D,  var_r = Σ_j (x_rj − mean_r)² / D   (biased, as PyTorch)
//             rstd_r = 1/sqrt(var_r + eps),  y_rj = (x_rj − mean_r)·rstd_r·w_j + b_j
//   backward, with x̂ = (x − mean_r)·rstd_r and g = dy·w:
//             dx_rj = rstd_r·(g_rj − Σ_k g_rk / D − x̂_rj·Σ_k g_rk·x̂_rk / D)
//             dw_j = Σ_r dy_rj·x̂_rj,  db_j = Σ_r dy_rj
// The dx formula: y depends on x_rj directly and through mean_r and rstd_r; d mean/dx = 1/D
// and d rstd/dx_rj = −rstd³·(x_rj − mean)/D give the two subtracted means.
// Strategy: one task per row for the statistics, y and dx (two passes over the row for the
// statistics — mean, then the centred squares, stabler than E[x²] − E[x]² — accumulated in
// double whatever T is, so a float32 row's statistics are as exact as its values); dw and db
// are column sums, one task per block of 64 columns walking the rows in order, accumulated in
// double. A row's sums run as vector reductions: each lane sums every 4th or 8th element, and
// the lanes are added at the end (a chain of scalar double adds, one a cycle at best, made
// these ops 4× their memory bound). The order is fixed by the build, not by the threads: the
// same bits every run and on any thread count.
#include <array>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {
constexpr int64_t kColumnBlock = 64;  // columns per task of the dw/db sums

// Calls f(std::true_type) when `on`, else f(std::false_type): whether there is a weight (or a
// bias) is decided once, outside the loops. Tested inside them (`pw ? pw[j] : 1.0`), it made
// GCC if-convert the load into a masked gather on AVX2. The arithmetic is the same either way
// (an absent weight is 1.0 and an absent bias 0.0, as before), so are the bits.
template <typename F>
void with_flag(bool on, F&& f) {
  if (on)
    f(std::true_type{});
  else
    f(std::false_type{});
}
}  // namespace

void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                                    Tensor& mean, Tensor& rstd) {
  // float32 math for 16-bit tensors (half_staging.h)
  if (HalfStaging::needed({&x, &weight, &bias, &y, &mean, &rstd})) {
    HalfStaging s;
    layer_norm_forward(s.in(x), s.in(weight), s.in(bias), eps, s.out(y), s.out(mean), s.out(rstd));
    return s.commit();
  }
  dispatch_floating(x.dtype(), "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    MINIDL_INTERNAL_ASSERT(D > 0 && y.shape() == x.shape() && mean.numel() == rows && rstd.numel() == rows);
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = y.data<T>();
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    with_flag(pw != nullptr, [&](auto has_weight) {
    with_flag(pb != nullptr, [&](auto has_bias) {
    constexpr bool kWeight = decltype(has_weight)::value, kBias = decltype(has_bias)::value;
    parallel_rows(rows, 3 * rows * D, [&](int64_t r) {
      const T* in = px + r * D;  // [D]
      T* out = py + r * D;       // [D]
      const T *w_row = pw, *b_row = pb;  // locals: read through the capture, the stores to out could change them
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < D; ++j) sum += in[j];
      const double mu = sum / static_cast<double>(D);
      double sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t j = 0; j < D; ++j) {
        const double d = in[j] - mu;
        sq += d * d;
      }
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(D) + eps);
      pm[r] = static_cast<T>(mu);
      pr[r] = static_cast<T>(rs);
      for (int64_t j = 0; j < D; ++j) {
        const double w = kWeight ? static_cast<double>(w_row[j]) : 1.0, b = kBias ? static_cast<double>(b_row[j]) : 0.0;
        out[j] = static_cast<T>((in[j] - mu) * rs * w + b);
      }
    });
    });
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias) {
  // float32 math for 16-bit tensors (half_staging.h)
  if (HalfStaging::needed({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias})) {
    HalfStaging s;
    layer_norm_backward(s.in(dy), s.in(x), s.in(weight), s.in(mean), s.in(rstd), s.out(dx), s.out(dweight),
                        s.out(dbias));
    return s.commit();
  }
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = x.shape()[0], D = x.shape()[1];
    MINIDL_INTERNAL_ASSERT(D > 0 && dy.shape() == x.shape() && mean.numel() == rows && rstd.numel() == rows);
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pm = mean.data<T>();
    const T* pr = rstd.data<T>();
    if (dx.defined()) {
      T* pdx = dx.data<T>();
      with_flag(pw != nullptr, [&](auto has_weight) {
      constexpr bool kWeight = decltype(has_weight)::value;
      parallel_rows(rows, 2 * rows * D, [&](int64_t r) {
        const T* in = px + r * D;  // [D]
        const T* g = pdy + r * D;  // [D]
        T* out = pdx + r * D;      // [D]
        const T* w = pw;  // a local: read through the capture, the stores to out could change it
        const double mu = pm[r], rs = pr[r];
        double sum_g = 0, sum_g_xhat = 0;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
        for (int64_t j = 0; j < D; ++j) {
          const double gj = static_cast<double>(g[j]) * (kWeight ? static_cast<double>(w[j]) : 1.0);
          sum_g += gj;
          sum_g_xhat += gj * ((in[j] - mu) * rs);
        }
        const double mean_g = sum_g / static_cast<double>(D), mean_g_xhat = sum_g_xhat / static_cast<double>(D);
        for (int64_t j = 0; j < D; ++j) {
          const double gj = static_cast<double>(g[j]) * (kWeight ? static_cast<double>(w[j]) : 1.0);
          out[j] = static_cast<T>(rs * (gj - mean_g - (in[j] - mu) * rs * mean_g_xhat));
        }
      });
      });
    }
    if (!dweight.defined() && !dbias.defined()) return;
    T* pdw = dweight.defined() ? dweight.data<T>() : nullptr;
    T* pdb = dbias.defined() ? dbias.data<T>() : nullptr;
    const int64_t blocks = (D + kColumnBlock - 1) / kColumnBlock;
    parallel_rows(blocks, 2 * rows * D, [&](int64_t blk) {
      const int64_t j0 = blk * kColumnBlock, width = std::min(kColumnBlock, D - j0);
      std::array<double, kColumnBlock> acc_w{}, acc_b{};  // this block's column sums, rows in order
      for (int64_t r = 0; r < rows; ++r) {
        const T* in = px + r * D + j0;
        const T* g = pdy + r * D + j0;
        const double mu = pm[r], rs = pr[r];
        for (int64_t j = 0; j < width; ++j) {
          acc_w[static_cast<size_t>(j)] += static_cast<double>(g[j]) * ((in[j] - mu) * rs);
          acc_b[static_cast<size_t>(j)] += g[j];
        }
      }
      for (int64_t j = 0; j < width; ++j) {
        if (pdw) pdw[j0 + j] = static_cast<T>(acc_w[static_cast<size_t>(j)]);
        if (pdb) pdb[j0 + j] = static_cast<T>(acc_b[static_cast<size_t>(j)]);
      }
    });
  });
}

}  // namespace minidl::cpu
