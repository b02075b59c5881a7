// CUDA GELU (float32, bfloat16, float16), elementwise over contiguous [n], in the expressions of
// kernels/cpu/gelu.cpp:
//   None: y = 0.5·x·erfc(−x/√2)                    dy/dx = 0.5·erfc(−x/√2) + x·exp(−x²/2)/√(2π)
//   Tanh: u = √(2/π)·(x + 0.044715·x³),  y = x / (1 + exp(−2u))  (= 0.5·x·(1 + tanh u))
//         dy/dx = σ(2u) + 2x·σ(2u)·σ(−2u)·u',  u' = √(2/π)·(1 + 3·0.044715·x²)
// erfc and σ rather than 1 + erf and 1 + tanh: Note [GELU without cancellation] in
// kernels/cpu/gelu.cpp (PyTorch's kernels use the cancelling forms; the function is the same).
// Strategy: one grid-stride loop, an element per thread per trip, over a grid that fills the
// device. Unlike the map kernels of elementwise.cu these do real math per element (erfcf or two
// expf, a division), so plain float loads keep the memory system busy enough. The form is a
// template parameter: one kernel per form, no branch per element. A 16-bit tensor is read as 16
// bits and widened, the math runs in float, and each result is rounded once on store (half.cuh),
// as the CPU computes it: dx = round(float(dy) · gelu'(x)).
#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

// ---- kernels ----

template <typename T, GeluApproximate kForm>
__global__ void gelu_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(gelu_value<kForm>(to_float(x[i])));
}

template <typename T, GeluApproximate kForm>
__global__ void gelu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                     int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = from_float<T>(to_float(dy[i]) * gelu_derivative<kForm>(to_float(x[i])));
}

}  // namespace

// ---- launchers ----

void CudaBackend::gelu_forward(const Tensor& x, Tensor& y, GeluApproximate approximate) {
  MINIDL_INTERNAL_ASSERT(same_floating({&x, &y}) && all_contiguous({&x, &y}) && x.numel() == y.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const unsigned grid = grid_for(n, kThreads, multiprocessor_count());
  dispatch_float_and_half(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    if (approximate == GeluApproximate::Tanh) {
      MINIDL_LAUNCH(gelu_forward_kernel<T, GeluApproximate::Tanh>, grid, kThreads, 0, stream(), px, py, n);
    } else {
      MINIDL_LAUNCH(gelu_forward_kernel<T, GeluApproximate::None>, grid, kThreads, 0, stream(), px, py, n);
    }
  });
}

void CudaBackend::gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx, GeluApproximate approximate) {
  MINIDL_INTERNAL_ASSERT(same_floating({&dy, &x, &dx}) && all_contiguous({&dy, &x, &dx}) && x.numel() == dy.numel() &&
                         x.numel() == dx.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const unsigned grid = grid_for(n, kThreads, multiprocessor_count());
  dispatch_float_and_half(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pdy = static_cast<const T*>(dy.raw_data());
    const T* px = static_cast<const T*>(x.raw_data());
    T* pdx = static_cast<T*>(dx.raw_data());
    if (approximate == GeluApproximate::Tanh) {
      MINIDL_LAUNCH(gelu_backward_kernel<T, GeluApproximate::Tanh>, grid, kThreads, 0, stream(), pdy, px, pdx, n);
    } else {
      MINIDL_LAUNCH(gelu_backward_kernel<T, GeluApproximate::None>, grid, kThreads, 0, stream(), pdy, px, pdx, n);
    }
  });
}

}  // namespace minidl::cuda
