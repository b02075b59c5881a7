// Memory kernels of the CUDA backend: copies between host and device and between devices,
// the strided copy behind .contiguous(), dtype casts, fills, arange and row gathers.
//
//   strided_copy: dst[i...] = src[i...] for one shape, any strides on both sides (rank <= 8).
//                 One thread per element of a grid-stride loop over the linear index of the
//                 shape; each thread turns it into coordinates, then into both offsets.
//   cast:         dst[i] = T_dst(src[i]) between every two of float32, int64, bfloat16 and float16,
//                 each element as core/half.h's convert<> does it on the CPU: into a 16-bit format
//                 through float (an int64 rounds to float first, then to 16 bits: PyTorch's order),
//                 round to nearest even (__float2bfloat16 / __float2half, bit-identical to the host
//                 casts except for a NaN's bits: kernels/cuda/half.cuh); out of one by widening
//                 it to float, exactly, then static_cast (int64: truncation toward zero).
//   fill/arange:  dst[i] = value / start + i·step (computed in double, as on the CPU; a 16-bit
//                 fill value is rounded once on the host, by core/half.h, and stored as bits).
//   gather_rows:  out[i, :] = src[indices[i], :]; a 2-D grid-stride loop over [rows, width].
// Elements are moved as 2-, 4- or 8-byte words; the dtype only matters where values change.
//
// Copies: host -> device is asynchronous on the device's stream (from pinned memory it is a
// true DMA overlap; from pageable memory the driver stages it before returning, so the source
// may be reused at once). Device -> host waits for the stream, because the caller reads the
// result next. Device -> device across devices orders the two streams with an event.

#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/pinned_allocator.h"

namespace minidl::cuda {

namespace {

constexpr int kThreads = 256;

// Shape and strides by value in the kernel's parameter space (rank <= 8, as Shape allows).
struct StridedLayout {
  int rank = 0;
  int64_t sizes[8] = {};
  int64_t src_strides[8] = {};
  int64_t dst_strides[8] = {};
};

// ---- kernels ----

template <typename Word>
__global__ void strided_copy_kernel(const Word* __restrict__ src, Word* __restrict__ dst, StridedLayout layout,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, s = 0, d = 0;
    for (int k = layout.rank - 1; k >= 0; --k) {
      const int64_t c = rest % layout.sizes[k];
      rest /= layout.sizes[k];
      s += c * layout.src_strides[k];
      d += c * layout.dst_strides[k];
    }
    dst[d] = src[s];
  }
}

// One element from From to To, as core/half.h's convert<> (see the header comment).
template <typename To, typename From>
__device__ inline To convert_element(From v) {
  if constexpr (is_half_type_v<To>) {
    if constexpr (is_half_type_v<From>) return from_float<To>(to_float(v));  // bfloat16 <-> float16
    else return from_float<To>(static_cast<float>(v));  // float32 as is, int64 rounded to float first
  } else if constexpr (is_half_type_v<From>) {
    return static_cast<To>(to_float(v));  // exact widening, then float32 as is or truncation to int64
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ src, To* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = convert_element<To>(src[i]);
}

template <typename T>
__global__ void arange_kernel(T* __restrict__ dst, double start, double step, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = start + static_cast<double>(i) * step;
    if constexpr (is_half_type_v<T>) dst[i] = from_float<T>(static_cast<float>(v));  // through float, as on the CPU
    else dst[i] = static_cast<T>(v);
  }
}

template <typename T>
__global__ void fill_kernel(T* __restrict__ dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

// out [rows, width] row-major; src [*, width]; indices [rows] already range-checked.
template <typename Word>
__global__ void gather_rows_kernel(const Word* __restrict__ src, const int64_t* __restrict__ indices,
                                   Word* __restrict__ out, int64_t rows, int64_t width) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const Word* from = src + indices[r] * width;
    Word* to = out + r * width;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < width;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      to[j] = from[j];
  }
}

// ---- helpers of the launchers ----

size_t element_bytes(const Tensor& t) { return dtype_size(t.dtype()); }

// For the asserts: a dtype a CUDA tensor can have (core's empty() refuses float64 on a device).
inline bool cuda_dtype(const Tensor& t) { return t.dtype() != DType::Float64; }

template <typename F>
void with_word(size_t bytes, F&& f) {
  if (bytes == 2) f(uint16_t{});
  else if (bytes == 4) f(uint32_t{});
  else f(uint64_t{});
}

// f(T{}) for the device element type of any dtype a CUDA tensor can have.
template <typename F>
void dispatch_cuda_dtype(DType dtype, F&& f) {
  if (dtype == DType::Int64) f(int64_t{});
  else dispatch_float_and_half(dtype, std::forward<F>(f));
}

}  // namespace

// ---- launchers ----

void CudaBackend::copy(const Tensor& src, Tensor& dst) {
  MINIDL_INTERNAL_ASSERT(src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.is_contiguous() &&
                         dst.is_contiguous());
  const size_t bytes = static_cast<size_t>(src.numel()) * element_bytes(src);
  if (bytes == 0) return;
  const Device from = src.device(), to = dst.device();
  if (from.is_cpu() && to.is_cuda()) {  // host -> device, on the destination's stream
    CudaBackend& be = backend_of(dst);
    const bool pinned = is_pinned(src);
    if (!pinned)
      be.refuse_in_capture("a copy from pageable host memory to the device",
                           "a replay would read the host address again, long after the caller reused it; copy into "
                           "a static input before replay(), or copy from pinned memory (pin_memory)");
    DeviceGuard guard(be.device_index());
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyHostToDevice, be.stream()));
    if (pinned) pinned_host_allocator().record_stream(src.impl()->storage.data(), be.stream());
    return;
  }
  if (from.is_cuda() && to.is_cpu()) {  // device -> host: the caller reads it next, so wait
    CudaBackend& be = backend_of(src);
    be.refuse_in_capture("a copy to the host (item(), to_vector, .to(cpu), printing)",
                         "the host would wait for a value that is being recorded, not computed");
    DeviceGuard guard(be.device_index());
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDeviceToHost, be.stream()));
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(be.stream()));
    be.raise_deferred_errors();  // a host wait: Note [deferred target errors] (cross_entropy.cu)
    return;
  }
  // ops::to drives a copy through the backend of its non-CPU side: CPU <-> this device, or device <-> device.
  MINIDL_INTERNAL_ASSERT(from.is_cuda() && to.is_cuda(), "copy from ", from, " to ", to);
  CudaBackend& dst_be = backend_of(dst);
  if (from == to) {
    DeviceGuard guard(dst_be.device_index());
    MINIDL_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDeviceToDevice, dst_be.stream()));
    return;
  }
  // Across devices: the copy waits for the source stream's pending writes, runs on the
  // destination's stream, and is waited for, so the source may be freed on return.
  CudaBackend& src_be = backend_of(src);
  src_be.refuse_in_capture("a copy between devices", "it waits for both devices");
  dst_be.refuse_in_capture("a copy between devices", "it waits for both devices");
  cudaEvent_t ready = nullptr;
  {
    DeviceGuard guard(src_be.device_index());
    MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    MINIDL_CUDA_CHECK(cudaEventRecord(ready, src_be.stream()));
  }
  DeviceGuard guard(dst_be.device_index());
  const cudaError_t wait = cudaStreamWaitEvent(dst_be.stream(), ready, 0);
  const cudaError_t peer = wait == cudaSuccess ? cudaMemcpyPeerAsync(dst.raw_data(), to.index, src.raw_data(),
                                                                     from.index, bytes, dst_be.stream())
                                               : wait;
  const cudaError_t done = peer == cudaSuccess ? cudaStreamSynchronize(dst_be.stream()) : peer;
  (void)cudaEventDestroy(ready);
  MINIDL_CUDA_CHECK(done);
}

void CudaBackend::strided_copy(const Tensor& src, Tensor& dst) {
  MINIDL_INTERNAL_ASSERT(cuda_dtype(src) && src.dtype() == dst.dtype() && src.shape() == dst.shape());
  const int64_t n = src.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  StridedLayout layout;
  layout.rank = src.dim();
  for (int k = 0; k < layout.rank; ++k) {
    layout.sizes[k] = src.shape()[k];
    layout.src_strides[k] = src.strides()[k];
    layout.dst_strides[k] = dst.strides()[k];
  }
  const unsigned grid = grid_for(n, kThreads, sm_count_);
  with_word(element_bytes(src), [&](auto word) {
    using W = decltype(word);
    MINIDL_LAUNCH(strided_copy_kernel<W>, grid, kThreads, 0, stream_, static_cast<const W*>(src.raw_data()),
                  static_cast<W*>(dst.raw_data()), layout, n);
  });
}

void CudaBackend::cast(const Tensor& src, Tensor& dst) {
  MINIDL_INTERNAL_ASSERT(cuda_dtype(src) && cuda_dtype(dst) && src.numel() == dst.numel());
  const int64_t n = src.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  const unsigned grid = grid_for(n, kThreads, sm_count_);
  if (src.dtype() == dst.dtype()) {
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), static_cast<size_t>(n) * element_bytes(src),
                                      cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  dispatch_cuda_dtype(src.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_cuda_dtype(dst.dtype(), [&](auto to_tag) {
      using To = decltype(to_tag);
      if constexpr (!std::is_same_v<From, To>) {  // same types were copied above
        MINIDL_LAUNCH(cast_kernel<From, To>, grid, kThreads, 0, stream_, static_cast<const From*>(src.raw_data()),
                      static_cast<To*>(dst.raw_data()), n);
      }
    });
  });
}

void CudaBackend::fill(Tensor& dst, double value) {
  MINIDL_INTERNAL_ASSERT(cuda_dtype(dst) && dst.is_contiguous());
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  const unsigned grid = grid_for(n, kThreads, sm_count_);
  if (dst.dtype() == DType::Float32) {
    MINIDL_LAUNCH(fill_kernel<float>, grid, kThreads, 0, stream_, dst.data<float>(), static_cast<float>(value), n);
  } else if (is_half(dst.dtype())) {  // the value rounded once here, by the host's conversion (core/half.h)
    const uint16_t bits = dst.dtype() == DType::BFloat16 ? convert<bfloat16>(value).bits() : convert<float16>(value).bits();
    MINIDL_LAUNCH(fill_kernel<uint16_t>, grid, kThreads, 0, stream_, static_cast<uint16_t*>(dst.raw_data()), bits, n);
  } else {
    MINIDL_LAUNCH(fill_kernel<int64_t>, grid, kThreads, 0, stream_, dst.data<int64_t>(), static_cast<int64_t>(value),
                  n);
  }
}

void CudaBackend::arange(Tensor& dst, double start, double step) {
  MINIDL_INTERNAL_ASSERT(cuda_dtype(dst) && dst.is_contiguous());
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(device_);
  const unsigned grid = grid_for(n, kThreads, sm_count_);
  dispatch_cuda_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    MINIDL_LAUNCH(arange_kernel<T>, grid, kThreads, 0, stream_, static_cast<T*>(dst.raw_data()), start, step, n);
  });
}

void CudaBackend::gather_rows(const Tensor& src, const Tensor& indices, Tensor& out) {
  MINIDL_INTERNAL_ASSERT(cuda_dtype(src) && src.dtype() == out.dtype() && indices.dtype() == DType::Int64);
  const int64_t rows = out.dim() == 0 ? 0 : out.shape()[0];
  const int64_t width = rows == 0 ? 0 : out.numel() / rows;
  if (rows == 0 || width == 0) return;
  DeviceGuard guard(device_);
  const dim3 grid(static_cast<unsigned>(ceil_div(width < 4096 ? width : 4096, kThreads)),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  with_word(element_bytes(src), [&](auto word) {
    using W = decltype(word);
    MINIDL_LAUNCH(gather_rows_kernel<W>, grid, kThreads, 0, stream_, static_cast<const W*>(src.raw_data()),
                  indices.data<int64_t>(), static_cast<W*>(out.raw_data()), rows, width);
  });
}

}  // namespace minidl::cuda
