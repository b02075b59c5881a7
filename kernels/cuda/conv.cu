// CUDA 2-D convolution (float32) lowered to the backend's GEMM (matmul: the hand-written
// kernel or cuBLAS, as gemm_impl() says) through im2col / col2im, the same lowering as the CPU
// backend's (kernels/cpu/conv.cpp); docs/conv-as-gemm.md walks through the shapes. With
// S = H_out·W_out and a chunk of n samples in the GEMM's N dimension:
//   im2col:  col [C_in·KH·KW, n·S]   col[(c,i,j)][(n,oh,ow)] = x[n, c, oh·sh − ph + i·dh, ow·sw − pw + j·dw] or 0
//   forward: Y'_g [C_out/G, n·S] = W_g · col_g, then y[n, co, p] = Y'[co, n·S + p] + b[co]
//   backward: dY' = that permute of dy;  db = row sums of dY';  dW_g = dY'_g · col_gᵀ;
//             dcol_g = W_gᵀ · dY'_g;  dx = col2im(dcol)
// Each group's blocks are contiguous row ranges of W, col, Y' and dW, so a group's product is
// one matmul on row slices (narrow views), with transposes as flags.
//
// Note [conv chunks on the GPU]: the batch is cut into chunks of samples whose col buffer stays
// under kColBudget floats (32 MiB), the buffers (col, Y' / dY') are allocated once for the
// largest chunk, and forward, dW and dx loop over the chunks. The Fashion-MNIST CNN's training
// batch of 64 is one chunk; an evaluation batch of 1000 takes 7 instead of a 215 MiB
// buffer. y and dx are per sample, so chunking them changes no sum. dW and db sum over every
// sample: each chunk's product (or row sum) is computed apart, and from the second chunk on
// added into the result (accumulate_kernel), in chunk order — so the summation order differs
// from one product over the whole batch, but is fixed by the geometry alone: deterministic. The
// CPU chunks too, with a smaller budget (16 MiB) and a dot-product path for thin weight
// gradients (Note [thin weight gradients] in kernels/cpu/conv.cpp), so the two backends agree
// within rounding, not bit for bit.
//
// Kernels (one thread per output element, grid-stride loops; all bandwidth-bound copies):
//   im2col_kernel  over the col elements; consecutive threads take consecutive (n, oh, ow) of
//                  one row, so the writes coalesce and the reads of x mostly do (stride sw).
//   col2im_kernel  over the dx elements: each gathers the col entries that copied it — for each
//                  (i, j), oh = (ih + ph − i·dh) / sh when that divides — so no atomics are
//                  needed and every sum runs in a fixed order (deterministic).
//   rows_to_nchw_kernel / nchw_to_rows_kernel: the permutes, coalesced on the contiguous S runs.
//   accumulate_kernel: dst += src, the later chunks' dW and db.
#include <algorithm>

#include "core/error.h"
#include "kernels/half_staging.h"
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

// dst[i] += src[i].
__global__ void accumulate_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t total) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] += src[idx];
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

// Note [conv chunks on the GPU]: the col buffer of one chunk holds at most this many floats,
// unless one sample alone needs more (a chunk has at least one sample).
constexpr int64_t kColBudget = int64_t{1} << 23;  // 32 MiB

// col [C_in·KH·KW, n·S] from the n samples of x that start at `x` (s.n = n).
void im2col(CudaBackend& be, const float* x, Tensor& col, const ConvShape& s) {
  MINIDL_LAUNCH(im2col_kernel, grid_for(col.numel(), kThreads, be.multiprocessor_count()), kThreads, 0, be.stream(), x,
                col.data<float>(), s);
}

// dst += src, both contiguous with the same numel.
void accumulate(CudaBackend& be, Tensor& dst, const Tensor& src) {
  MINIDL_INTERNAL_ASSERT(dst.numel() == src.numel(), "accumulate: ", dst.shape(), " += ", src.shape());
  if (dst.numel() == 0) return;
  MINIDL_LAUNCH(accumulate_kernel, grid_for(dst.numel(), kThreads, be.multiprocessor_count()), kThreads, 0, be.stream(),
                dst.data<float>(), src.data<float>(), dst.numel());
}

// Rows [first, first + count) of a 2-D tensor, as a contiguous view.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow(0, first, count); }

// The first rows·cols elements of a contiguous buffer, as a contiguous [rows, cols] matrix: the
// buffers are sized for the largest chunk and the last chunk may be smaller.
Tensor leading_matrix(const Tensor& buffer, int64_t rows, int64_t cols) {
  return buffer.view(Shape{buffer.numel()}).narrow(0, 0, rows * cols).view(Shape{rows, cols});
}

// The op layer guarantees float32 operands on a CUDA device (computes_in); restated for debug builds.
void assert_float32([[maybe_unused]] const Tensor& t, [[maybe_unused]] const char* op, [[maybe_unused]] const char* what) {
  MINIDL_INTERNAL_ASSERT(!t.defined() || t.dtype() == DType::Float32, op, ": ", what, " is ", t.dtype());
}

}  // namespace

int64_t conv2d_samples_per_chunk(const Conv2dGeometry& g) {
  const int64_t per_sample = std::max<int64_t>(1, g.c_in * g.kh * g.kw * g.spatial_out());
  return std::clamp<int64_t>(kColBudget / per_sample, 1, std::max<int64_t>(g.n, 1));
}

// ---- launchers ----

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                                 const Conv2dGeometry& g) {
  if (HalfStaging::needed({&x, &w, &bias, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    conv2d_forward(s.in(x), s.in(w), s.in(bias), s.out(y), g);
    return s.commit();
  }
  DeviceGuard guard(device_index());
  assert_float32(x, "conv2d_forward", "x");
  assert_float32(w, "conv2d_forward", "weight");
  assert_float32(bias, "conv2d_forward", "bias");
  const int64_t S = g.spatial_out(), K = g.col_rows_per_group(), M = g.c_out_per_group();
  const int64_t rows = g.c_in * g.kh * g.kw, chunk = conv2d_samples_per_chunk(g);
  const TensorOptions opts = y.options();
  const Tensor col_buffer = empty(Shape{rows, chunk * S}, opts);   // col [C_in·KH·KW, chunk·S]
  const Tensor yt_buffer = empty(Shape{g.c_out, chunk * S}, opts);  // Y' [C_out, chunk·S]
  const Tensor w2 = w.reshape(Shape{g.c_out, K});                   // [C_out, C_in/G·KH·KW]
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {  // Note [conv chunks on the GPU]
    const int64_t count = std::min(chunk, g.n - n0), NS = count * S;
    ConvShape s = shape_of(g);
    s.n = count;
    Tensor col = leading_matrix(col_buffer, rows, NS);  // [C_in·KH·KW, count·S]
    Tensor yt = leading_matrix(yt_buffer, g.c_out, NS);  // Y' [C_out, count·S]
    im2col(*this, x.data<float>() + n0 * g.c_in * g.h * g.w, col, s);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Tensor out = rows_of(yt, grp * M, M);
      matmul(rows_of(w2, grp * M, M), rows_of(col, grp * K, K), out, false, false);  // Y'_g = W_g · col_g
    }
    float* py = y.data<float>() + n0 * g.c_out * S;  // y [count, C_out, S] of this chunk
    MINIDL_LAUNCH(rows_to_nchw_kernel, grid_for(count * g.c_out * S, kThreads, multiprocessor_count()), kThreads, 0,
                  stream(), yt.data<float>(), bias.defined() ? bias.data<float>() : nullptr, py, count, g.c_out, S);
  }
}

void CudaBackend::conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                  Tensor& db, const Conv2dGeometry& g) {
  if (HalfStaging::needed({&dy, &x, &w, &dx, &dw, &db})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    conv2d_backward(s.in(dy), s.in(x), s.in(w), s.out(dx), s.out(dw), s.out(db), g);
    return s.commit();
  }
  DeviceGuard guard(device_index());
  assert_float32(dy, "conv2d_backward", "dy");
  assert_float32(x, "conv2d_backward", "x");
  assert_float32(w, "conv2d_backward", "weight");
  const int64_t S = g.spatial_out(), K = g.col_rows_per_group(), M = g.c_out_per_group();
  const int64_t rows = g.c_in * g.kh * g.kw, chunk = conv2d_samples_per_chunk(g);
  const TensorOptions opts = dy.options();
  const Tensor dyt_buffer = empty(Shape{g.c_out, chunk * S}, opts);  // dY' [C_out, chunk·S]
  // col (rebuilt, not kept from forward) for dW, then dcol for dx: one buffer serves both in turn.
  const Tensor col_buffer = dw.defined() || dx.defined() ? empty(Shape{rows, chunk * S}, opts) : Tensor();
  // The later chunks' dW and db, added into dw and db (Note [conv chunks on the GPU]).
  const bool chunked = chunk < g.n;
  Tensor dw_part = chunked && dw.defined() ? empty(Shape{g.c_out, K}, opts) : Tensor();  // [C_out, C_in/G·KH·KW]
  Tensor db_part = chunked && db.defined() ? empty(Shape{g.c_out}, opts) : Tensor();     // [C_out]
  const Tensor w2 = w.reshape(Shape{g.c_out, K});
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0), NS = count * S;
    const bool first = n0 == 0;
    ConvShape s = shape_of(g);
    s.n = count;
    Tensor dyt = leading_matrix(dyt_buffer, g.c_out, NS);  // dY' [C_out, count·S]
    MINIDL_LAUNCH(nchw_to_rows_kernel, grid_for(dyt.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream(),
                  dy.data<float>() + n0 * g.c_out * S, dyt.data<float>(), count, g.c_out, S);
    if (db.defined()) {  // db[co] = Σ_(n,p) dY'[co, (n,p)]
      Tensor out = first ? db : db_part;
      sum_dim(dyt, g.c_out, NS, 1, out);
      if (!first) accumulate(*this, db, db_part);
    }
    if (!dw.defined() && !dx.defined()) continue;
    Tensor col = leading_matrix(col_buffer, rows, NS);  // [C_in·KH·KW, count·S]
    if (dw.defined()) {
      im2col(*this, x.data<float>() + n0 * g.c_in * g.h * g.w, col, s);
      Tensor dw2 = first ? dw.reshape(Shape{g.c_out, K}) : dw_part;  // a view: dw is contiguous
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        Tensor out = rows_of(dw2, grp * M, M);
        matmul(rows_of(dyt, grp * M, M), rows_of(col, grp * K, K), out, false, true);  // dW_g = dY'_g · col_gᵀ
      }
      if (!first) accumulate(*this, dw, dw_part);
    }
    if (dx.defined()) {
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        Tensor out = rows_of(col, grp * K, K);
        matmul(rows_of(w2, grp * M, M), rows_of(dyt, grp * M, M), out, true, false);  // dcol_g = W_gᵀ · dY'_g
      }
      float* pdx = dx.data<float>() + n0 * g.c_in * g.h * g.w;  // dx [count, C_in, H, W] of this chunk
      MINIDL_LAUNCH(col2im_kernel, grid_for(count * g.c_in * g.h * g.w, kThreads, multiprocessor_count()), kThreads, 0,
                    stream(), col.data<float>(), pdx, s);
    }
  }
}

}  // namespace minidl::cuda
