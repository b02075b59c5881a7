// CPU 2-D convolution lowered to the GEMM (kernels/cpu/gemm.cpp) through im2col / col2im.
// docs/conv-as-gemm.md walks through the shapes with a worked example.
//
// Math (per group g, with S = H_out·W_out and the batch folded into the GEMM's N dimension):
//   col  [C_in·KH·KW, N·S]   col[(c,i,j)][(n,oh,ow)] = x[n, c, oh·sh − ph + i·dh, ow·sw − pw + j·dw]
//                            (0 where that falls in the padding)
//   Y'_g [C_out/G, N·S]    = W_g [C_out/G, C_in/G·KH·KW] · col_g [C_in/G·KH·KW, N·S]
//   y    [N, C_out, S]       y[n, co, p] = Y'[co, n·S + p] + b[co]            (the "permute")
// Backward, with dY' the same permute of dy:
//   dW_g = dY'_g · col_gᵀ      db[co] = Σ_(n,p) dY'[co, (n,p)]
//   dcol_g = W_gᵀ · dY'_g      dx = col2im(dcol): every col entry adds back into the x element it copied
//
// Strategy: one GEMM per group over the whole batch rather than one per sample, so the GEMM
// sees a long N (N·S = 12544 for the second layer of the Fashion-MNIST CNN) that splits
// evenly over the threads, and its result does not depend on the thread count. The transposes
// are GEMM strides, never copies. im2col, col2im and the permutes are bandwidth-bound copies,
// parallel over independent rows / planes; the GEMM does the arithmetic. The price is the
// col buffer (C_in·KH·KW·N·S elements: 14 MiB in float32 for that layer), written once and
// read once by the GEMM's packing, and rebuilt in backward instead of kept. A large batch is
// cut into chunks of samples that keep that buffer under 16 MiB (samples_per_chunk). One
// exception: a weight gradient with fewer than 16 columns is a set of long dot products, not a
// GEMM (Note [thin weight gradients]).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/half_staging.h"

namespace minidl::cpu {

namespace {

// The range [lo, hi) of output positions o in [0, out) whose input o·stride − pad + offset
// lies in [0, in): outside it the window reads padding.
std::pair<int64_t, int64_t> valid_range(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t offset) {
  // o·stride >= pad − offset  and  o·stride < in + pad − offset
  const int64_t lo_num = pad - offset, hi_num = in + pad - offset;
  int64_t lo = lo_num <= 0 ? 0 : (lo_num + stride - 1) / stride;
  int64_t hi = hi_num <= 0 ? 0 : (hi_num + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

// col [C_in·KH·KW, N·S] from x [N, C_in, H, W]; parallel over (row, sample) pairs, each of
// which writes S contiguous elements.
template <typename T>
void im2col(const T* x, T* col, const Conv2dGeometry& g) {
  const int64_t rows = g.c_in * g.kh * g.kw, S = g.spatial_out(), NS = g.n * S;
  parallel_rows(rows * g.n, rows * NS, [&](int64_t rn) {
    const int64_t r = rn / g.n, n = rn % g.n;
    const int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
    const T* plane = x + (n * g.c_in + c) * g.h * g.w;  // [H, W]
    T* out = col + r * NS + n * S;                      // [H_out, W_out]
    const auto [ow_lo, ow_hi] = valid_range(g.w_out, g.w, g.stride_w, g.pad_w, j * g.dilation_w);
    for (int64_t oh = 0; oh < g.h_out; ++oh) {
      T* o = out + oh * g.w_out;
      const int64_t ih = oh * g.stride_h - g.pad_h + i * g.dilation_h;
      if (ih < 0 || ih >= g.h) {
        std::fill(o, o + g.w_out, T(0));
        continue;
      }
      const T* in = plane + ih * g.w - g.pad_w + j * g.dilation_w;  // in[ow·sw] = x[.., ih, iw]
      std::fill(o, o + ow_lo, T(0));
      if (g.stride_w == 1) {
        std::memcpy(o + ow_lo, in + ow_lo, static_cast<size_t>(ow_hi - ow_lo) * sizeof(T));
      } else {
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) o[ow] = in[ow * g.stride_w];
      }
      std::fill(o + ow_hi, o + g.w_out, T(0));
    }
  });
}

// dx [N, C_in, H, W] = Σ of the col entries that copied each element (the adjoint of im2col);
// parallel over (n, c) planes, which no two workers share, in a fixed order per element.
template <typename T>
void col2im(const T* col, T* dx, const Conv2dGeometry& g) {
  const int64_t S = g.spatial_out(), NS = g.n * S;
  parallel_rows(g.n * g.c_in, g.n * g.c_in * g.kh * g.kw * S, [&](int64_t nc) {
    const int64_t n = nc / g.c_in, c = nc % g.c_in;
    T* plane = dx + nc * g.h * g.w;
    std::fill(plane, plane + g.h * g.w, T(0));
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* src = col + ((c * g.kh + i) * g.kw + j) * NS + n * S;
        const auto [ow_lo, ow_hi] = valid_range(g.w_out, g.w, g.stride_w, g.pad_w, j * g.dilation_w);
        for (int64_t oh = 0; oh < g.h_out; ++oh) {
          const int64_t ih = oh * g.stride_h - g.pad_h + i * g.dilation_h;
          if (ih < 0 || ih >= g.h) continue;
          T* out = plane + ih * g.w - g.pad_w + j * g.dilation_w;
          const T* s = src + oh * g.w_out;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow * g.stride_w] += s[ow];
        }
      }
    }
  });
}

// The GEMM's view of a row-major [rows, cols] block at p, transposed or not.
template <typename T>
void set_a(GemmArgs<T>& a, const T* p, int64_t cols, bool trans) {
  a.a = p;
  a.rs_a = trans ? 1 : cols;
  a.cs_a = trans ? cols : 1;
}
template <typename T>
void set_b(GemmArgs<T>& a, const T* p, int64_t cols, bool trans) {
  a.b = p;
  a.rs_b = trans ? 1 : cols;
  a.cs_b = trans ? cols : 1;
}

// Samples per GEMM: as many as keep the col buffer under kColBudget elements (16 MiB in float32),
// at least one. The Fashion-MNIST CNN's training batch of 64 fits in one chunk; an evaluation
// batch of 1000 takes 14, instead of a 215 MiB buffer. The chunking depends only on the
// geometry, never on the thread count, so results stay the same on any number of threads.
constexpr int64_t kColBudget = int64_t{1} << 22;

int64_t samples_per_chunk(const Conv2dGeometry& g) {
  const int64_t per_sample = std::max<int64_t>(1, g.c_in * g.kh * g.kw * g.spatial_out());
  return std::clamp<int64_t>(kColBudget / per_sample, 1, std::max<int64_t>(g.n, 1));
}

// The geometry of samples [n0, n0 + count) of g (the same layer on a smaller batch).
Conv2dGeometry chunk_of(const Conv2dGeometry& g, int64_t count) {
  Conv2dGeometry c = g;
  c.n = count;
  return c;
}

// Note [thin weight gradients]
// dW_g = dY'_g · col_gᵀ is [M, K], a sum over n·S terms. When K is small — a CNN's first layer
// has one input channel, K = 9 — the GEMM fills K of the NR lanes of its output tile and packs
// long panels for a tiny result: the Fashion-MNIST CNN's 32×9 over 50,176 terms took 2.5 ms
// (11.6 GFLOP/s) on two threads, no faster than on one. Both operands are rows along n·S, so
// each entry is a dot product of two contiguous rows. Here the n·S terms are cut into pieces of
// kPiece; each piece's M·K dot products run in parallel over pieces, vectorised along the rows,
// and the partials are summed in piece order, in double: the same sums whatever the thread count.
constexpr int64_t kThinK = 16;     // below this many columns of dW_g, the path below
constexpr int64_t kPiece = 2048;   // terms per partial sum (for the CNN's 32 + 9 rows, 328 KiB: in L2)

template <typename T>
void thin_weight_grad(const T* dyt, const T* col, T* dw, int64_t M, int64_t K, int64_t NS, bool accumulate) {
  const int64_t pieces = (NS + kPiece - 1) / kPiece;
  std::vector<T> partial(static_cast<size_t>(pieces * M * K));
  parallel_rows(pieces, M * K * NS, [&](int64_t pc) {
    const int64_t p0 = pc * kPiece, len = std::min(kPiece, NS - p0);
    T* out = partial.data() + pc * M * K;
    for (int64_t m = 0; m < M; ++m) {
      const T* a = dyt + m * NS + p0;
      for (int64_t k = 0; k < K; ++k) {
        const T* b = col + k * NS + p0;
        T acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t p = 0; p < len; ++p) acc += a[p] * b[p];
        out[m * K + k] = acc;
      }
    }
  });
  for (int64_t i = 0; i < M * K; ++i) {
    double sum = accumulate ? static_cast<double>(dw[i]) : 0.0;
    for (int64_t pc = 0; pc < pieces; ++pc) sum += static_cast<double>(partial[static_cast<size_t>(pc * M * K + i)]);
    dw[i] = static_cast<T>(sum);
  }
}

}  // namespace

void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                                const Conv2dGeometry& geometry) {
  if (HalfStaging::needed({&x, &w, &bias, &y})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    conv2d_forward(s.in(x), s.in(w), s.in(bias), s.out(y), geometry);
    return s.commit();
  }
  dispatch_floating(y.dtype(), "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t chunk = samples_per_chunk(geometry), S = geometry.spatial_out();
    const int64_t K = geometry.col_rows_per_group(), M = geometry.c_out_per_group();
    Tensor col = empty(Shape{geometry.c_in * geometry.kh * geometry.kw, chunk * S}, y.options());  // [C_in·KH·KW, n·S]
    Tensor yt = empty(Shape{geometry.c_out, chunk * S}, y.options());                              // Y' [C_out, n·S]
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    for (int64_t n0 = 0; n0 < geometry.n; n0 += chunk) {
      const Conv2dGeometry g = chunk_of(geometry, std::min(chunk, geometry.n - n0));
      const int64_t NS = g.n * S;
      im2col(x.data<T>() + n0 * g.c_in * g.h * g.w, col.data<T>(), g);
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        GemmArgs<T> a;
        a.m = M;
        a.n = NS;
        a.k = K;
        set_a(a, w.data<T>() + grp * M * K, K, false);       // W_g [M, K]
        set_b(a, col.data<T>() + grp * K * NS, NS, false);  // col_g [K, n·S]
        a.c = yt.data<T>() + grp * M * NS;                   // Y'_g [M, n·S]
        a.ldc = NS;
        gemm(a);
      }
      // y[n0 + n, co, :] = Y'[co, n·S : (n+1)·S] + b[co]
      const T* pyt = yt.data<T>();
      T* py = y.data<T>() + n0 * g.c_out * S;
      parallel_rows(g.n * g.c_out, g.n * g.c_out * S, [&](int64_t nco) {
        const int64_t n = nco / g.c_out, co = nco % g.c_out;
        const T* src = pyt + co * NS + n * S;
        T* dst = py + nco * S;
        const T b = pb ? pb[co] : T(0);
#pragma omp simd
        for (int64_t p = 0; p < S; ++p) dst[p] = src[p] + b;
      });
    }
  });
}

void CpuBackend::conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                 Tensor& db, const Conv2dGeometry& geometry) {
  if (HalfStaging::needed({&dy, &x, &w, &dx, &dw, &db})) {  // float32 math for 16-bit tensors (half_staging.h)
    HalfStaging s;
    conv2d_backward(s.in(dy), s.in(x), s.in(w), s.out(dx), s.out(dw), s.out(db), geometry);
    return s.commit();
  }
  dispatch_floating(dy.dtype(), "conv2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t chunk = samples_per_chunk(geometry), S = geometry.spatial_out();
    const int64_t K = geometry.col_rows_per_group(), M = geometry.c_out_per_group();
    const int64_t rows = geometry.c_in * geometry.kh * geometry.kw;
    if (db.defined()) {  // db[co] = Σ_(n,p) dy[n, co, p], in double, in index order
      const T* pdy = dy.data<T>();
      T* pdb = db.data<T>();
      parallel_rows(geometry.c_out, geometry.n * geometry.c_out * S, [&](int64_t co) {
        double acc = 0;
        for (int64_t n = 0; n < geometry.n; ++n) {
          const T* plane = pdy + (n * geometry.c_out + co) * S;
          for (int64_t p = 0; p < S; ++p) acc += plane[p];
        }
        pdb[co] = static_cast<T>(acc);
      });
    }
    if (!dw.defined() && !dx.defined()) return;
    Tensor dyt = empty(Shape{geometry.c_out, chunk * S}, dy.options());  // dY' [C_out, n·S]
    // col (rebuilt, not kept from forward) for dW, dcol for dx: one buffer serves both in turn.
    Tensor col = empty(Shape{rows, chunk * S}, dy.options());
    for (int64_t n0 = 0; n0 < geometry.n; n0 += chunk) {
      const Conv2dGeometry g = chunk_of(geometry, std::min(chunk, geometry.n - n0));
      const int64_t NS = g.n * S;
      // dY': the inverse of the forward's permute.
      const T* pdy = dy.data<T>() + n0 * g.c_out * S;
      T* pdyt = dyt.data<T>();
      parallel_rows(g.n * g.c_out, g.n * g.c_out * S, [&](int64_t nco) {
        const int64_t n = nco / g.c_out, co = nco % g.c_out;
        std::memcpy(pdyt + co * NS + n * S, pdy + nco * S, static_cast<size_t>(S) * sizeof(T));
      });
      if (dw.defined()) {
        im2col(x.data<T>() + n0 * g.c_in * g.h * g.w, col.data<T>(), g);
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          if (K < kThinK) {  // Note [thin weight gradients]
            thin_weight_grad(pdyt + grp * M * NS, col.data<T>() + grp * K * NS, dw.data<T>() + grp * M * K, M, K, NS,
                             n0 > 0);
            continue;
          }
          GemmArgs<T> a;
          a.m = M;
          a.n = K;
          a.k = NS;
          set_a(a, pdyt + grp * M * NS, NS, false);           // dY'_g [M, n·S]
          set_b(a, col.data<T>() + grp * K * NS, NS, true);  // col_gᵀ: [n·S, K] read from [K, n·S]
          a.c = dw.data<T>() + grp * M * K;                   // dW_g [M, K], summed over the chunks
          a.ldc = K;
          a.beta = n0 == 0 ? T(0) : T(1);
          gemm(a);
        }
      }
      if (dx.defined()) {
        for (int64_t grp = 0; grp < g.groups; ++grp) {
          GemmArgs<T> a;
          a.m = K;
          a.n = NS;
          a.k = M;
          set_a(a, w.data<T>() + grp * M * K, K, true);  // W_gᵀ: [K, M] read from [M, K]
          set_b(a, pdyt + grp * M * NS, NS, false);       // dY'_g [M, n·S]
          a.c = col.data<T>() + grp * K * NS;             // dcol_g [K, n·S]
          a.ldc = NS;
          gemm(a);
        }
        col2im(col.data<T>(), dx.data<T>() + n0 * g.c_in * g.h * g.w, g);
      }
    }
  });
}

}  // namespace minidl::cpu
