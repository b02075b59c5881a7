// Elementwise kernels of the CUDA backend (float32, bfloat16 and float16; equal also compares
// int64). A 16-bit op reads 16 bits, computes in float32 and rounds once on store (half.cuh), the
// same math in the same order as the CPU's per-element conversion, so the results agree bit for
// bit (a NaN's bits aside).
//   binary:        out[i] = a[i] op b[i], op in {+, -, *, /}, over out's shape (contiguous);
//                  a and b are views of out's shape with any strides (0 along broadcast dims).
//   relu_forward:  y = x > 0 ? x : 0                  (x, y contiguous [n])
//   relu_backward: dx = y > 0 ? dy : 0                (y is the forward output)
//   equal:         out = (a == b) ? 1 : 0 as float32  (a, b contiguous, same dtype)
// Strategy: these kernels move bytes and do almost no math, so they are written to keep the
// memory system busy. The contiguous cases go through one grid-stride "map" kernel (one wave of
// resident blocks) that reads and writes 16-byte float4s, four per thread per trip (many loads
// in flight per SM), with a scalar head and tail so that any size and any 4-byte-aligned start
// is handled (Note [vector alignment]); the 16-bit map kernel does the same with 16-byte uint4s
// of 8 elements (Note [16-bit vectors]). binary picks the map kernel when both inputs are
// contiguous, a variant that keeps the scalar in a register when one input is a broadcast
// single element (x * 0.5, 1 - x), and a strided kernel otherwise: the host first drops size-1
// dims and merges dims that are contiguous in both inputs (a bias row over [N, C] becomes
// rank 2), then each thread unravels its output index into two input offsets, in 32-bit
// arithmetic whenever every index fits.
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"

namespace minidl::cuda {

namespace {

constexpr int kMapThreads = 256;
constexpr int kMapUnroll = 4;  // float4s per thread per grid-stride trip

// Note [vector alignment]: a float4 access needs a 16-byte-aligned address. Tensors start
// 64-byte aligned, but a view (narrow, split) can start at any element, so the launcher peels
// `head` scalar elements until the output is aligned, and vectorises the body only if every
// input is then aligned too (same phase); otherwise head = n and the whole range runs scalar.
struct VectorSplit {
  int64_t head = 0;     // scalar elements [0, head)
  int64_t vectors = 0;  // float4s over [head, head + 4 * vectors); the scalar tail follows
};

// The same for any element type T: `vectors` counts 16-byte units of 16 / sizeof(T) elements.
template <int kInputs, typename T>
VectorSplit split_for_vectors(int64_t n, const T* out, const T* in0, const T* in1) {
  constexpr int64_t kPerVector = 16 / sizeof(T);
  const auto addr = [](const T* p) { return reinterpret_cast<uintptr_t>(p); };
  VectorSplit s;
  if ((addr(out) & (sizeof(T) - 1)) != 0) {  // not even element-aligned: never vectorise
    s.head = n;
    return s;
  }
  int64_t head = static_cast<int64_t>(((16 - (addr(out) & 15)) & 15) / sizeof(T));
  if (head > n) head = n;
  bool aligned = ((addr(in0) + static_cast<uintptr_t>(head) * sizeof(T)) & 15) == 0;
  if (kInputs == 2) aligned = aligned && ((addr(in1) + static_cast<uintptr_t>(head) * sizeof(T)) & 15) == 0;
  if (!aligned) {
    s.head = n;
    return s;
  }
  s.head = head;
  s.vectors = (n - head) / kPerVector;
  return s;
}

// ---- functors ----

template <BinaryOp kOp>
struct BinaryFn {
  __device__ float operator()(float x, float y) const {
    if constexpr (kOp == BinaryOp::Add) return x + y;
    else if constexpr (kOp == BinaryOp::Sub) return x - y;
    else if constexpr (kOp == BinaryOp::Mul) return x * y;
    else return x / y;
  }
  __device__ BinaryFn bind() const { return *this; }
};

// op(a, s) or op(s, b) where s is one element in device memory: bind() reads it once per
// thread, so the loop body does not reload it (out may alias the other input, which would
// otherwise force a reload after every store).
template <BinaryOp kOp, bool kScalarLeft>
struct ScalarBound {
  float s;
  __device__ float operator()(float v) const { return kScalarLeft ? BinaryFn<kOp>{}(s, v) : BinaryFn<kOp>{}(v, s); }
};

template <BinaryOp kOp, bool kScalarLeft, typename T = float>
struct ScalarFn {
  const T* scalar;
  __device__ ScalarBound<kOp, kScalarLeft> bind() const { return {to_float(*scalar)}; }
};

// Same comparison as the CPU (x > 0 ? x : 0): NaN and -0 map to +0.
struct ReluFn {
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
  __device__ ReluFn bind() const { return *this; }
};

struct ReluGradFn {  // (dy, y)
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
  __device__ ReluGradFn bind() const { return *this; }
};

template <int kInputs, class G>
__device__ inline float apply(const G& g, float a, float b) {
  if constexpr (kInputs == 1) {
    (void)b;
    return g(a);
  } else {
    return g(a, b);
  }
}

template <int kInputs, class G>
__device__ inline float4 apply4(const G& g, float4 a, float4 b) {
  return make_float4(apply<kInputs>(g, a.x, b.x), apply<kInputs>(g, a.y, b.y), apply<kInputs>(g, a.z, b.z),
                     apply<kInputs>(g, a.w, b.w));
}

// ---- kernels ----

// out[i] = f(in0[i] [, in1[i]]) for i < n: float4 body per the VectorSplit, scalar head/tail.
// No __restrict__: binary may run in place (out == in0), which the op layer does for the mean.
template <int kInputs, class F>
__global__ void __launch_bounds__(kMapThreads)
    map_kernel(F f, float* out, const float* in0, const float* in1, int64_t n, VectorSplit split) {
  const auto g = f.bind();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  const float4* a4 = reinterpret_cast<const float4*>(in0 + split.head);  // [vectors] float4
  const float4* b4 = reinterpret_cast<const float4*>((kInputs == 2 ? in1 : in0) + split.head);
  float4* o4 = reinterpret_cast<float4*>(out + split.head);
  for (int64_t v = tid; v < split.vectors; v += stride * kMapUnroll) {
    float4 a[kMapUnroll], b[kMapUnroll];
    // All loads of the trip first, then the stores: kMapUnroll independent 16-byte loads in flight.
#pragma unroll
    for (int u = 0; u < kMapUnroll; ++u) {
      const int64_t k = v + u * stride;
      if (k < split.vectors) {
        a[u] = a4[k];
        if constexpr (kInputs == 2) b[u] = b4[k];
        else b[u] = a[u];
      }
    }
#pragma unroll
    for (int u = 0; u < kMapUnroll; ++u) {
      const int64_t k = v + u * stride;
      if (k < split.vectors) o4[k] = apply4<kInputs>(g, a[u], b[u]);
    }
  }
  for (int64_t i = tid; i < split.head; i += stride)
    out[i] = apply<kInputs>(g, in0[i], kInputs == 2 ? in1[i] : 0.0f);
  for (int64_t i = split.head + 4 * split.vectors + tid; i < n; i += stride)
    out[i] = apply<kInputs>(g, in0[i], kInputs == 2 ? in1[i] : 0.0f);
}

// Note [16-bit vectors]: the 16-bit map kernel is map_kernel with uint4s of 8 bfloat16 / float16
// elements in place of float4s (the same 16 bytes per access, so the same memory-system
// behaviour, twice the elements). Each element is widened to float, f runs in float, and each
// result is rounded once as it is packed (half.cuh's unpack8 / pack8). VectorSplit and the
// scalar head and tail are as in Note [vector alignment], in units of 2-byte elements.
template <typename T, int kInputs, class F>
__global__ void __launch_bounds__(kMapThreads)
    map_half_kernel(F f, T* out, const T* in0, const T* in1, int64_t n, VectorSplit split) {
  const auto g = f.bind();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  const uint4* a8 = reinterpret_cast<const uint4*>(in0 + split.head);  // [vectors] uint4 of 8 elements
  const uint4* b8 = reinterpret_cast<const uint4*>((kInputs == 2 ? in1 : in0) + split.head);
  uint4* o8 = reinterpret_cast<uint4*>(out + split.head);
  for (int64_t v = tid; v < split.vectors; v += stride * kMapUnroll) {
    uint4 a[kMapUnroll], b[kMapUnroll];
#pragma unroll
    for (int u = 0; u < kMapUnroll; ++u) {  // every load of the trip first, as in map_kernel
      const int64_t k = v + u * stride;
      if (k < split.vectors) {
        a[u] = a8[k];
        if constexpr (kInputs == 2) b[u] = b8[k];
      }
    }
#pragma unroll
    for (int u = 0; u < kMapUnroll; ++u) {
      const int64_t k = v + u * stride;
      if (k < split.vectors) {
        float fa[8], fb[8] = {}, r[8];
        unpack8<T>(a[u], fa);
        if constexpr (kInputs == 2) unpack8<T>(b[u], fb);
#pragma unroll
        for (int j = 0; j < 8; ++j) r[j] = apply<kInputs>(g, fa[j], fb[j]);
        o8[k] = pack8<T>(r);
      }
    }
  }
  for (int64_t i = tid; i < split.head; i += stride)
    out[i] = from_float<T>(apply<kInputs>(g, to_float(in0[i]), kInputs == 2 ? to_float(in1[i]) : 0.0f));
  for (int64_t i = split.head + 8 * split.vectors + tid; i < n; i += stride)
    out[i] = from_float<T>(apply<kInputs>(g, to_float(in0[i]), kInputs == 2 ? to_float(in1[i]) : 0.0f));
}

// The geometry of a strided binary op after collapsing (see collapse_geometry): out is
// contiguous over `size`, a and b are read at Σ index_d · stride_x[d]. Passed by value.
struct StridedGeometry {
  int rank = 0;
  int64_t size[Shape::kMaxRank] = {};
  int64_t stride_a[Shape::kMaxRank] = {};
  int64_t stride_b[Shape::kMaxRank] = {};
};

// One output element per thread (grid-stride): unravel i over the collapsed dims, innermost
// first. Index is int32_t when every index and offset fits (integer division is much cheaper).
// T: float, or a 16-bit type read and written as such with the op in float (half.cuh).
template <typename T, typename Index, BinaryOp kOp>
__global__ void __launch_bounds__(kMapThreads)
    binary_strided_kernel(StridedGeometry geo, const T* a, const T* b, T* out, int64_t n) {
  const BinaryFn<kOp> op;
  const Index stride = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < static_cast<Index>(n); i += stride) {
    Index rem = i, oa = 0, ob = 0;
#pragma unroll
    for (int d = Shape::kMaxRank - 1; d >= 1; --d) {
      if (d < geo.rank) {
        const Index size = static_cast<Index>(geo.size[d]);
        const Index c = rem % size;
        rem /= size;
        oa += c * static_cast<Index>(geo.stride_a[d]);
        ob += c * static_cast<Index>(geo.stride_b[d]);
      }
    }
    oa += rem * static_cast<Index>(geo.stride_a[0]);
    ob += rem * static_cast<Index>(geo.stride_b[0]);
    out[i] = from_float<T>(op(to_float(a[oa]), to_float(b[ob])));
  }
}

template <typename T>
__global__ void __launch_bounds__(kMapThreads)
    equal_kernel(const T* __restrict__ a, const T* __restrict__ b, float* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if constexpr (is_half_type_v<T>) out[i] = to_float(a[i]) == to_float(b[i]) ? 1.0f : 0.0f;  // as the CPU compares
    else out[i] = a[i] == b[i] ? 1.0f : 0.0f;
}

// ---- host helpers ----

// Blocks of map_kernel<kInputs, F> that fit on one multiprocessor at once (registers decide).
// The grid-stride grid is one such wave: a second, partial wave would run the last share of
// the work at a fraction of the occupancy.
template <int kInputs, class F>
int map_blocks_per_multiprocessor() {
  static const int blocks = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, map_kernel<kInputs, F>, kMapThreads, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; fall back to a safe guess
      b = 4;
    }
    return b > 0 ? b : 1;
  }();
  return blocks;
}

template <typename T, int kInputs, class F>
int map_half_blocks_per_multiprocessor() {
  static const int blocks = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, map_half_kernel<T, kInputs, F>, kMapThreads, 0) !=
        cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; fall back to a safe guess
      b = 4;
    }
    return b > 0 ? b : 1;
  }();
  return blocks;
}

// The 16-bit map (Note [16-bit vectors]); T is __nv_bfloat16 or __half.
template <int kInputs, typename T, class F>
void launch_map_half(const CudaBackend& be, F f, T* out, const T* in0, const T* in1, int64_t n) {
  const VectorSplit split = split_for_vectors<kInputs>(n, out, in0, in1);
  const int64_t work = split.vectors > 0 ? ceil_div(split.vectors, kMapUnroll) : n;
  const unsigned blocks =
      grid_for(work, kMapThreads, be.multiprocessor_count(), map_half_blocks_per_multiprocessor<T, kInputs, F>());
  MINIDL_LAUNCH(map_half_kernel<T, kInputs, F>, blocks, kMapThreads, 0, be.stream(), f, out, in0, in1, n, split);
}

template <int kInputs, class F>
void launch_map(const CudaBackend& be, F f, float* out, const float* in0, const float* in1, int64_t n) {
  const VectorSplit split = split_for_vectors<kInputs>(n, out, in0, in1);
  // Threads needed: one per kMapUnroll float4s of the body, or one per element when scalar.
  const int64_t work = split.vectors > 0 ? ceil_div(split.vectors, kMapUnroll) : n;
  const unsigned blocks =
      grid_for(work, kMapThreads, be.multiprocessor_count(), map_blocks_per_multiprocessor<kInputs, F>());
  MINIDL_LAUNCH(map_kernel<kInputs, F>, blocks, kMapThreads, 0, be.stream(), f, out, in0, in1, n, split);
}

// The map kernel for T's width: float4s of float32, uint4s of 16-bit elements.
template <int kInputs, typename T, class F>
void launch_map_any(const CudaBackend& be, F f, T* out, const T* in0, const T* in1, int64_t n) {
  if constexpr (std::is_same_v<T, float>) launch_map<kInputs>(be, f, out, in0, in1, n);
  else launch_map_half<kInputs>(be, f, out, in0, in1, n);
}

// True when t reads one element for every index (all strides of non-trivial dims are 0).
bool is_broadcast_scalar(const Tensor& t) {
  for (int d = 0; d < t.dim(); ++d)
    if (t.shape()[d] != 1 && t.strides()[d] != 0) return false;
  return true;
}

// Drops size-1 dims and merges dim d into d+1 when both inputs step through them as one dim
// (stride[d] == stride[d+1] * size[d+1] for a and for b); the row-major order of out's index
// is unchanged, so out stays contiguous over the collapsed sizes.
StridedGeometry collapse_geometry(const Shape& shape, const Shape& sa, const Shape& sb) {
  StridedGeometry g;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    if (g.rank > 0) {
      const int last = g.rank - 1;
      // Merging the new (inner) dim d into the previous kept dim `last`.
      if (g.stride_a[last] == sa[d] * shape[d] && g.stride_b[last] == sb[d] * shape[d]) {
        g.size[last] *= shape[d];
        g.stride_a[last] = sa[d];
        g.stride_b[last] = sb[d];
        continue;
      }
    }
    g.size[g.rank] = shape[d];
    g.stride_a[g.rank] = sa[d];
    g.stride_b[g.rank] = sb[d];
    ++g.rank;
  }
  if (g.rank == 0) {  // every dim has size 1: one element
    g.rank = 1;
    g.size[0] = 1;
  }
  return g;
}

// Whether every linear index and every input offset of geo fits comfortably in int32.
bool fits_int32(const StridedGeometry& g, int64_t n) {
  constexpr int64_t kLimit = int64_t{1} << 30;  // headroom: i + grid stride must not overflow
  if (n >= kLimit) return false;
  int64_t max_a = 0, max_b = 0;
  for (int d = 0; d < g.rank; ++d) {
    if (g.stride_a[d] < 0 || g.stride_b[d] < 0) return false;
    max_a += (g.size[d] - 1) * g.stride_a[d];
    max_b += (g.size[d] - 1) * g.stride_b[d];
    if (max_a >= kLimit || max_b >= kLimit) return false;
  }
  return true;
}

template <typename T, BinaryOp kOp>
void binary_typed(const CudaBackend& be, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = out.numel();
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  const bool a_contig = a.is_contiguous(), b_contig = b.is_contiguous();
  if (a_contig && b_contig) {
    launch_map_any<2>(be, BinaryFn<kOp>{}, po, pa, pb, n);
    return;
  }
  if (a_contig && is_broadcast_scalar(b)) {
    launch_map_any<1>(be, ScalarFn<kOp, false, T>{pb}, po, pa, static_cast<const T*>(nullptr), n);
    return;
  }
  if (b_contig && is_broadcast_scalar(a)) {
    launch_map_any<1>(be, ScalarFn<kOp, true, T>{pa}, po, pb, static_cast<const T*>(nullptr), n);
    return;
  }
  const StridedGeometry geo = collapse_geometry(out.shape(), a.strides(), b.strides());
  const unsigned blocks = grid_for(n, kMapThreads, be.multiprocessor_count());
  if (fits_int32(geo, n)) {
    MINIDL_LAUNCH(binary_strided_kernel<T, int32_t, kOp>, blocks, kMapThreads, 0, be.stream(), geo, pa, pb, po, n);
  } else {
    MINIDL_LAUNCH(binary_strided_kernel<T, int64_t, kOp>, blocks, kMapThreads, 0, be.stream(), geo, pa, pb, po, n);
  }
}

}  // namespace

// ---- launchers ----

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  MINIDL_INTERNAL_ASSERT(same_floating({&a, &b, &out}) && out.is_contiguous(), binary_op_name(op));
  MINIDL_INTERNAL_ASSERT(a.shape() == out.shape() && b.shape() == out.shape(), binary_op_name(op), ": ", a.shape(),
                         " and ", b.shape(), " not expanded to ", out.shape());
  if (out.numel() == 0) return;
  DeviceGuard guard(device_index());
  dispatch_float_and_half(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::Add: binary_typed<T, BinaryOp::Add>(*this, a, b, out); break;
      case BinaryOp::Sub: binary_typed<T, BinaryOp::Sub>(*this, a, b, out); break;
      case BinaryOp::Mul: binary_typed<T, BinaryOp::Mul>(*this, a, b, out); break;
      case BinaryOp::Div: binary_typed<T, BinaryOp::Div>(*this, a, b, out); break;
    }
  });
}

void CudaBackend::relu_forward(const Tensor& x, Tensor& y) {
  MINIDL_INTERNAL_ASSERT(same_floating({&x, &y}) && all_contiguous({&x, &y}) && x.numel() == y.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  dispatch_float_and_half(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_map_any<1>(*this, ReluFn{}, static_cast<T*>(y.raw_data()), static_cast<const T*>(x.raw_data()),
                  static_cast<const T*>(nullptr), n);
  });
}

void CudaBackend::relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  MINIDL_INTERNAL_ASSERT(same_floating({&dy, &y, &dx}) && all_contiguous({&dy, &y, &dx}));
  MINIDL_INTERNAL_ASSERT(dy.numel() == y.numel() && dx.numel() == y.numel());
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  dispatch_float_and_half(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_map_any<2>(*this, ReluGradFn{}, static_cast<T*>(dx.raw_data()), static_cast<const T*>(dy.raw_data()),
                  static_cast<const T*>(y.raw_data()), n);
  });
}

void CudaBackend::equal(const Tensor& a, const Tensor& b, Tensor& out) {
  // a and b: any dtype a CUDA tensor can have (core's empty() refuses float64).
  MINIDL_INTERNAL_ASSERT(a.dtype() == b.dtype() && a.dtype() != DType::Float64);
  MINIDL_INTERNAL_ASSERT(out.dtype() == DType::Float32 && all_contiguous({&a, &b, &out}));
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(device_index());
  const unsigned blocks = grid_for(n, kMapThreads, multiprocessor_count());
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    MINIDL_LAUNCH(equal_kernel<T>, blocks, kMapThreads, 0, stream(), static_cast<const T*>(a.raw_data()),
                  static_cast<const T*>(b.raw_data()), out.data<float>(), n);
  };
  if (a.dtype() == DType::Int64) launch(int64_t{});
  else dispatch_float_and_half(a.dtype(), launch);
}

}  // namespace minidl::cuda
