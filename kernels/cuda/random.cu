// Random fills on the GPU from the same Philox4x32-10 counters as the CPU (core/philox.h):
// element i of a tensor drawn at generator offset `offset` uses counter offset + i, so one
// seed gives the same numbers on every run, whatever the grid, and on the CPU and the GPU
// (uniform and randint bit for bit; normal to the last bit of double log/cos).
//
//   uniform: low + (high - low)·u, u = 24 random bits / 2^24 (float32), nudged below high.
//   normal:  Box–Muller in double on two 53-bit uniforms of the block, then rounded to float.
//   randint: low + floor(r · range / 2^64) for a 64-bit r (multiply-shift, __umul64hi).
// A bfloat16 / float16 tensor draws the float32 values of the same counters and rounds each once
// (through float, as the CPU does), a uniform pulled back below `high` if rounding lifted it
// onto it, by one unit of the 16-bit encoding (kernels/cpu/memory.cpp's below()).
// One thread per element in a grid-stride loop.
#include "core/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

// ---- kernels ----

// below_high: for a 16-bit T, the bits of the largest value of T below high (host-computed).
template <typename T>
__global__ void uniform_kernel(T* __restrict__ dst, int64_t n, double low, double high, unsigned short below_high,
                               uint64_t seed, uint64_t offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(i));
    const double u = philox::uniform_float(b);
    float v = static_cast<float>(low + (high - low) * u);
    if constexpr (is_half_type_v<T>) {
      T h = from_float<T>(v);
      if (static_cast<double>(to_float(h)) >= high && high > low) h = from_bits<T>(below_high);
      dst[i] = h;
    } else {
      (void)below_high;
      if (v >= static_cast<float>(high) && high > low) v = nextafterf(static_cast<float>(high), static_cast<float>(low));
      dst[i] = v;
    }
  }
}

template <typename T>
__global__ void normal_kernel(T* __restrict__ dst, int64_t n, double mean, double stddev, uint64_t seed,
                              uint64_t offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(i));
    const double u1 = 1.0 - philox::uniform_double(b.x[0], b.x[1]);  // (0, 1]: log stays finite
    const double u2 = philox::uniform_double(b.x[2], b.x[3]);
    const double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    dst[i] = from_float<T>(static_cast<float>(mean + stddev * z));  // through float, as on the CPU
  }
}

__global__ void randint_kernel(int64_t* __restrict__ dst, int64_t n, int64_t low, uint64_t range, uint64_t seed,
                               uint64_t offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = philox::bits64(philox::block_for(seed, offset, static_cast<uint64_t>(i)));
    dst[i] = low + static_cast<int64_t>(__umul64hi(r, range));
  }
}

// The bits of the largest 16-bit value below high (high > low), as kernels/cpu/memory.cpp's
// below(): toward low, a positive encoding steps down by one, a negative one up; +0 steps to the
// smallest negative subnormal.
unsigned short half_below(DType dtype, double high) {
  const uint16_t bits = dtype == DType::BFloat16 ? convert<bfloat16>(high).bits() : convert<float16>(high).bits();
  if ((bits & 0x7fffu) == 0) return 0x8001;
  return static_cast<unsigned short>((bits & 0x8000u) ? bits + 1 : bits - 1);
}

}  // namespace

// ---- launchers ----

void CudaBackend::uniform(Tensor& dst, double low, double high, uint64_t seed, uint64_t offset) {
  refuse_in_capture("uniform_ (rand)", kRandomInCapture);
  MINIDL_INTERNAL_ASSERT(is_floating(dst.dtype()) && dst.is_contiguous());  // uniform() asks for a floating dtype
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  const unsigned short below_high = is_half(dst.dtype()) && high > low ? half_below(dst.dtype(), high) : 0;
  dispatch_float_and_half(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MINIDL_LAUNCH(uniform_kernel<T>, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_,
                  static_cast<T*>(dst.raw_data()), n, low, high, below_high, seed, offset);
  });
}

void CudaBackend::normal(Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset) {
  refuse_in_capture("normal_ (randn)", kRandomInCapture);
  MINIDL_INTERNAL_ASSERT(is_floating(dst.dtype()) && dst.is_contiguous());  // randn() asks for a floating dtype
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  dispatch_float_and_half(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MINIDL_LAUNCH(normal_kernel<T>, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_,
                  static_cast<T*>(dst.raw_data()), n, mean, stddev, seed, offset);
  });
}

void CudaBackend::randint(Tensor& dst, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  refuse_in_capture("randint", kRandomInCapture);
  MINIDL_INTERNAL_ASSERT(dst.dtype() == DType::Int64 && dst.is_contiguous());  // randint() draws int64, then casts
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  const uint64_t range = static_cast<uint64_t>(high - low);
  MINIDL_LAUNCH(randint_kernel, grid_for(n, kThreads, sm_count_), kThreads, 0, stream_, dst.data<int64_t>(), n, low,
                range, seed, offset);
}

}  // namespace minidl::cuda
