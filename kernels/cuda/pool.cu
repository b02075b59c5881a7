// CUDA 2-D pooling (float32) over each [H, W] plane of x [N, C, H, W], the same definitions as
// kernels/cpu/pool.cpp (PyTorch's floor mode, no dilation):
//   window of output (oh, ow): rows [oh·sh − ph, +KH), columns [ow·sw − pw, +KW), clipped
//   max: y = the window's maximum (NaN wins, then the first in row-major order), indices =
//        ih·W + iw of it; backward: dx[e] = Σ dy over the outputs whose index is e
//   avg: y = Σ window / divisor (window clipped to the padded input, or to the input);
//        backward: dx[e] = Σ over the windows covering e of dy / divisor
// Strategy: one thread per output element in forward, one per input element in backward. A
// backward thread visits only the windows that can cover its element (at most ⌈KH/sh⌉·⌈KW/sw⌉)
// and gathers, so there are no atomics and every sum runs in a fixed order. All of it is
// bandwidth-bound: a thread reads KH·KW inputs (L1/L2 hits for overlapping windows) and
// writes one output.
#include "core/error.h"
#include "kernels/half_staging.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

struct PoolShape {
  int64_t planes, h, w, kh, kw, sh, sw, ph, pw, h_out, w_out;
  bool count_include_pad;
};

PoolShape shape_of(const Pool2dGeometry& g) {
  return {g.n * g.c, g.h, g.w, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.h_out, g.w_out,
          g.count_include_pad};
}

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// The window of output (oh, ow), clipped to the input, and its divisor.
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};

__device__ Window window_at(const PoolShape& s, int64_t oh, int64_t ow) {
  int64_t h0 = oh * s.sh - s.ph, w0 = ow * s.sw - s.pw;
  int64_t h1 = min64(h0 + s.kh, s.h + s.ph), w1 = min64(w0 + s.kw, s.w + s.pw);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = max64(h0, 0);
  w0 = max64(w0, 0);
  h1 = min64(h1, s.h);
  w1 = min64(w1, s.w);
  return {h0, h1, w0, w1, s.count_include_pad ? padded : (h1 - h0) * (w1 - w0)};
}

// The outputs whose windows can contain input row ih: oh in [lo, hi).
__device__ void covering(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t out, int64_t& lo, int64_t& hi) {
  // oh·stride − pad <= i < oh·stride − pad + k  ⇔  (i + pad − k) / stride < oh <= (i + pad) / stride
  const int64_t top = i + pad - k + 1;  // oh·stride >= top
  lo = top <= 0 ? 0 : (top + stride - 1) / stride;
  hi = min64((i + pad) / stride + 1, out);
}

// ---- kernels ----

__global__ void max_pool_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                        int64_t* __restrict__ indices, PoolShape s) {
  const int64_t out_plane = s.h_out * s.w_out, total = s.planes * out_plane;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx / out_plane, oh = (idx % out_plane) / s.w_out, ow = idx % s.w_out;
    const float* in = x + p * s.h * s.w;
    const Window win = window_at(s, oh, ow);
    int64_t best_at = win.h0 * s.w + win.w0;
    float best = in[best_at];
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const float v = in[ih * s.w + iw];
        if (v > best || (isnan(v) && !isnan(best))) {
          best = v;
          best_at = ih * s.w + iw;
        }
      }
    y[idx] = best;
    indices[idx] = best_at;
  }
}

__global__ void max_pool_backward_kernel(const float* __restrict__ dy, const int64_t* __restrict__ indices,
                                         float* __restrict__ dx, PoolShape s) {
  const int64_t in_plane = s.h * s.w, out_plane = s.h_out * s.w_out, total = s.planes * in_plane;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx / in_plane, e = idx % in_plane, ih = e / s.w, iw = e % s.w;
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, s.kh, s.sh, s.ph, s.h_out, oh0, oh1);
    covering(iw, s.kw, s.sw, s.pw, s.w_out, ow0, ow1);
    float acc = 0.0f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t o = p * out_plane + oh * s.w_out + ow;
        if (indices[o] == e) acc += dy[o];
      }
    dx[idx] = acc;
  }
}

__global__ void avg_pool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, PoolShape s) {
  const int64_t out_plane = s.h_out * s.w_out, total = s.planes * out_plane;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx / out_plane, oh = (idx % out_plane) / s.w_out, ow = idx % s.w_out;
    const float* in = x + p * s.h * s.w;
    const Window win = window_at(s, oh, ow);
    float sum = 0.0f;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += in[ih * s.w + iw];
    y[idx] = sum / static_cast<float>(win.divisor);
  }
}

__global__ void avg_pool_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx, PoolShape s) {
  const int64_t in_plane = s.h * s.w, out_plane = s.h_out * s.w_out, total = s.planes * in_plane;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx / in_plane, e = idx % in_plane, ih = e / s.w, iw = e % s.w;
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, s.kh, s.sh, s.ph, s.h_out, oh0, oh1);
    covering(iw, s.kw, s.sw, s.pw, s.w_out, ow0, ow1);
    float acc = 0.0f;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        acc += dy[p * out_plane + oh * s.w_out + ow] / static_cast<float>(window_at(s, oh, ow).divisor);
    dx[idx] = acc;
  }
}

}  // namespace

// ---- launchers ----

void CudaBackend::max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dGeometry& g) {
  if (HalfStaging::needed({&x, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    max_pool2d_forward(s.in(x), s.out(y), indices, g);
    return s.commit();
  }
  DeviceGuard guard(device_index());
  MINIDL_INTERNAL_ASSERT(x.dtype() == DType::Float32, "max_pool2d_forward: x is ", x.dtype());
  MINIDL_LAUNCH(max_pool_forward_kernel, grid_for(y.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream(),
                x.data<float>(), y.data<float>(), indices.data<int64_t>(), shape_of(g));
}

void CudaBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, Tensor& dx, const Pool2dGeometry& g) {
  if (HalfStaging::needed({&dy, &dx})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    max_pool2d_backward(s.in(dy), indices, s.out(dx), g);
    return s.commit();
  }
  DeviceGuard guard(device_index());
  MINIDL_INTERNAL_ASSERT(dy.dtype() == DType::Float32, "max_pool2d_backward: dy is ", dy.dtype());
  MINIDL_LAUNCH(max_pool_backward_kernel, grid_for(dx.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream(),
                dy.data<float>(), indices.data<int64_t>(), dx.data<float>(), shape_of(g));
}

void CudaBackend::avg_pool2d_forward(const Tensor& x, Tensor& y, const Pool2dGeometry& g) {
  if (HalfStaging::needed({&x, &y})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    avg_pool2d_forward(s.in(x), s.out(y), g);
    return s.commit();
  }
  DeviceGuard guard(device_index());
  MINIDL_INTERNAL_ASSERT(x.dtype() == DType::Float32, "avg_pool2d_forward: x is ", x.dtype());
  MINIDL_LAUNCH(avg_pool_forward_kernel, grid_for(y.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream(),
                x.data<float>(), y.data<float>(), shape_of(g));
}

void CudaBackend::avg_pool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dGeometry& g) {
  if (HalfStaging::needed({&dy, &dx})) {  // float32 math (kernels/half_staging.h)
    HalfStaging s;
    avg_pool2d_backward(s.in(dy), s.out(dx), g);
    return s.commit();
  }
  DeviceGuard guard(device_index());
  MINIDL_INTERNAL_ASSERT(dy.dtype() == DType::Float32, "avg_pool2d_backward: dy is ", dy.dtype());
  MINIDL_LAUNCH(avg_pool_backward_kernel, grid_for(dx.numel(), kThreads, multiprocessor_count()), kThreads, 0, stream(),
                dy.data<float>(), dx.data<float>(), shape_of(g));
}

}  // namespace minidl::cuda
