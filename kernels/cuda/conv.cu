// CUDA 2-D convolution (float32) lowered to the backend's GEMM (matmul: the hand-written
// kernel or cuBLAS, as gemm_impl() says) through im2col / col2im; the CPU backend
// (kernels/cpu/conv.cpp) does the same in the same order, and docs/conv-as-gemm.md walks
// through the shapes. With S = H_out·W_out and the whole batch in the GEMM's N dimension:
//   im2col:  col [C_in·KH·KW, N·S]   col[(c,i,j)][(n,oh,ow)] = x[n, c, oh·sh − ph + i·dh, ow·sw − pw + j·dw] or 0
//   forward: Y'_g [C_out/G, N·S] = W_g · col_g, then y[n, co, p] = Y'[co, n·S + p] + b[co]
//   backward: dY' = that permute of dy;  db = row sums of dY';  dW_g = dY'_g · col_gᵀ;
//             dcol_g = W_gᵀ · dY'_g;  dx = col2im(dcol)
// Each group's blocks are contiguous row ranges of W, col, Y' and dW, so a group's product is
// one matmul on row slices (narrow views), with transposes as flags.
//
// Kernels (one thread per output element, grid-stride loops; all bandwidth-bound copies):
//   im2col_kernel  over the col elements; consecutive threads take consecutive (n, oh, ow) of
//                  one row, so the writes coalesce and the reads of x mostly do (stride sw).
//   col2im_kernel  over the dx elements: each gathers the col entries that copied it — for each
//                  (i, j), oh = (ih + ph − i·dh) / sh when that divides — so no atomics are
//                  needed and every sum runs in a fixed order (deterministic).
//   rows_to_nchw_kernel / nchw_to_rows_kernel: the permutes, coalesced on the contiguous S runs.
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

// The geometry fields the kernels read, passed by value.
struct ConvShape {
  int64_t n, c_in, h, w, kh, kw, sh, sw, ph, pw, dh, dw, h_out, w_out;
};

ConvShape shape_of(const Conv2dGeometry& g) {
  return {g.n, g.c_in, g.h, g.w, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w,
          g.h_out, g.w_out};
}

// ---- kernels ----

// col [C_in·KH·KW, N·S] from x [N, C_in, H, W].
__global__ void im2col_kernel(const float* __restrict__ x, float* __restrict__ col, ConvShape s) {
  const int64_t S = s.h_out * s.w_out, NS = s.n * S, total = s.c_in * s.kh * s.kw * NS;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / NS, q = idx % NS;  // row (c, i, j), column (n, oh, ow)
    const int64_t c = r / (s.kh * s.kw), i = (r / s.kw) % s.kh, j = r % s.kw;
    const int64_t n = q / S, oh = (q % S) / s.w_out, ow = q % s.w_out;
    const int64_t ih = oh * s.sh - s.ph + i * s.dh, iw = ow * s.sw - s.pw + j * s.dw;
    const bool inside = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
    col[idx] = inside ? x[((n * s.c_in + c) * s.h + ih) * s.w + iw] : 0.0f;
  }
}

// dx [N, C_in, H, W] = Σ of the dcol entries that im2col copied from each element.
__global__ void col2im_kernel(const float* __restrict__ dcol, float* __restrict__ dx, ConvShape s) {
  const int64_t S = s.h_out * s.w_out, NS = s.n * S, total = s.n * s.c_in * s.h * s.w;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = idx % s.w, ih = (idx / s.w) % s.h, c = (idx / (s.w * s.h)) % s.c_in;
    const int64_t n = idx / (s.w * s.h * s.c_in);
    float acc = 0.0f;
    for (int64_t i = 0; i < s.kh; ++i) {
      const int64_t th = ih + s.ph - i * s.dh;  // = oh·sh
      if (th < 0 || th % s.sh != 0 || th / s.sh >= s.h_out) continue;
      const int64_t oh = th / s.sh;
      for (int64_t j = 0; j < s.kw; ++j) {
        const int64_t tw = iw + s.pw - j * s.dw;  // = ow·sw
        if (tw < 0 || tw % s.sw != 0 || tw / s.sw >= s.w_out) continue;
        const int64_t ow = tw / s.sw;
        acc += dcol[((c * s.kh + i) * s.kw + j) * NS + n * S + oh * s.w_out + ow];
      }
    }
    dx[idx] = acc;
  }
}

// y [N, C, S] from rows [C, N·S], plus bias[c] (may be null).
__global__ void rows_to_nchw_kernel(const float* __restrict__ rows, const float* __restrict__ bias,
                                    float* __restrict__ y, int64_t n, int64_t c, int64_t S) {
  const int64_t total = n * c * S;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx % S, ch = (idx / S) % c, b = idx / (S * c);
    y[idx] = rows[(ch * n + b) * S + p] + (bias ? bias[ch] : 0.0f);
  }
}

// rows [C, N·S] from dy [N, C, S].
__global__ void nchw_to_rows_kernel(const float* __restrict__ dy, float* __restrict__ rows, int64_t n, int64_t c,
                                    int64_t S) {
  const int64_t total = n * c * S;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx % S, b = (idx / S) % n, ch = idx / (S * n);
    rows[idx] = dy[(b * c + ch) * S + p];
  }
}

// ---- helpers of the launchers ----

void im2col(CudaBackend& be, const Tensor& x, Tensor& col, const Conv2dGeometry& g) {
  im2col_kernel<<<grid_for(col.numel(), kThreads, be.multiprocessor_count()), kThreads, 0, be.stream()>>>(
      x.data<float>(), col.data<float>(), shape_of(g));
  MINIDL_LAUNCH_CHECK();
}

// Rows [first, first + count) of a 2-D tensor, as a contiguous view.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow(0, first, count); }

// The op layer guarantees float32 operands on a CUDA device (computes_in); restated for debug builds.
void assert_float32([[maybe_unused]] const Tensor& t, [[maybe_unused]] const char* op, [[maybe_unused]] const char* what) {
  MINIDL_INTERNAL_ASSERT(!t.defined() || t.dtype() == DType::Float32, op, ": ", what, " is ", t.dtype());
}

}  // namespace

// ---- launchers ----

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                                 const Conv2dGeometry& g) {
  DeviceGuard guard(device_index());
  assert_float32(x, "conv2d_forward", "x");
  assert_float32(w, "conv2d_forward", "weight");
  assert_float32(bias, "conv2d_forward", "bias");
  const int64_t S = g.spatial_out(), NS = g.n * S, K = g.col_rows_per_group(), M = g.c_out_per_group();
  const TensorOptions opts = y.options();
  Tensor col = empty(Shape{g.c_in * g.kh * g.kw, NS}, opts);  // [C_in·KH·KW, N·S]
  Tensor yt = empty(Shape{g.c_out, NS}, opts);                 // Y' [C_out, N·S]
  im2col(*this, x, col, g);
  const Tensor w2 = w.reshape(Shape{g.c_out, K});  // [C_out, C_in/G·KH·KW]
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    Tensor out = rows_of(yt, grp * M, M);
    matmul(rows_of(w2, grp * M, M), rows_of(col, grp * K, K), out, false, false);  // Y'_g = W_g · col_g
  }
  rows_to_nchw_kernel<<<grid_for(y.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream()>>>(
      yt.data<float>(), bias.defined() ? bias.data<float>() : nullptr, y.data<float>(), g.n, g.c_out, S);
  MINIDL_LAUNCH_CHECK();
}

void CudaBackend::conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                  Tensor& db, const Conv2dGeometry& g) {
  DeviceGuard guard(device_index());
  assert_float32(dy, "conv2d_backward", "dy");
  assert_float32(x, "conv2d_backward", "x");
  assert_float32(w, "conv2d_backward", "weight");
  const int64_t S = g.spatial_out(), NS = g.n * S, K = g.col_rows_per_group(), M = g.c_out_per_group();
  const TensorOptions opts = dy.options();
  Tensor dyt = empty(Shape{g.c_out, NS}, opts);  // dY' [C_out, N·S]
  nchw_to_rows_kernel<<<grid_for(dyt.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream()>>>(
      dy.data<float>(), dyt.data<float>(), g.n, g.c_out, S);
  MINIDL_LAUNCH_CHECK();
  if (db.defined()) sum_dim(dyt, g.c_out, NS, 1, db);  // db[co] = Σ_(n,p) dY'[co, (n,p)]
  const Tensor w2 = w.reshape(Shape{g.c_out, K});
  Tensor col = empty(Shape{g.c_in * g.kh * g.kw, NS}, opts);  // col for dW, then dcol for dx
  if (dw.defined()) {
    im2col(*this, x, col, g);
    Tensor dw2 = dw.reshape(Shape{g.c_out, K});  // a view: dw is contiguous
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Tensor out = rows_of(dw2, grp * M, M);
      matmul(rows_of(dyt, grp * M, M), rows_of(col, grp * K, K), out, false, true);  // dW_g = dY'_g · col_gᵀ
    }
  }
  if (dx.defined()) {
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Tensor out = rows_of(col, grp * K, K);
      matmul(rows_of(w2, grp * M, M), rows_of(dyt, grp * M, M), out, true, false);  // dcol_g = W_gᵀ · dY'_g
    }
    col2im_kernel<<<grid_for(dx.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream()>>>(
        col.data<float>(), dx.data<float>(), shape_of(g));
    MINIDL_LAUNCH_CHECK();
  }
}

}  // namespace minidl::cuda
