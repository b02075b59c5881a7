// CPU memory kernels: copies (contiguous, strided, host<->host), dtype casts, fills, arange,
// row gathers, and the Philox-based random fills (element i uses counter offset + i, so the
// values do not depend on thread count or device).
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/strided.h"

namespace minidl::cpu {

void CpuBackend::copy(const Tensor& src, Tensor& dst) {
  MINIDL_CHECK(src.device().is_cpu() && dst.device().is_cpu(), "copy: the cpu backend copies between cpu tensors, got ",
               src.device(), " -> ", dst.device());
  std::memcpy(dst.raw_data(), src.raw_data(), static_cast<size_t>(src.numel()) * dtype_size(src.dtype()));
}

// Element by element through the N-d counter only where it must be: two contiguous tensors are
// one block move, and tensors whose last dimension is contiguous in both (a narrowed or sliced
// batch, a column block) are one move per row. The element walk costs about 4x a memcpy of a
// gradient that fits in cache, and the reducers of DataParallel and DistributedDataParallel
// copy every gradient twice per step. memmove, not memcpy: copy_ does not refuse a source and
// destination that overlap (x.narrow(0, 1, n).copy_(x.narrow(0, 0, n))), and memcpy on
// overlapping bytes is undefined; rows that overlap other rows are copied in row order, as the
// element walk copies elements in element order.
void CpuBackend::strided_copy(const Tensor& src, Tensor& dst) {
  const size_t item = dtype_size(src.dtype());
  if (src.is_contiguous() && dst.is_contiguous()) {
    std::memmove(dst.raw_data(), src.raw_data(), static_cast<size_t>(dst.numel()) * item);
    return;
  }
  const int rank = dst.dim();
  if (rank >= 2 && src.strides()[rank - 1] == 1 && dst.strides()[rank - 1] == 1) {
    Shape rows, src_rows, dst_rows;  // the counter over every dimension but the last
    for (int d = 0; d + 1 < rank; ++d) {
      rows.push_back(dst.shape()[d]);
      src_rows.push_back(src.strides()[d]);
      dst_rows.push_back(dst.strides()[d]);
    }
    const size_t row_bytes = static_cast<size_t>(dst.shape()[rank - 1]) * item;
    const auto* s = static_cast<const char*>(src.raw_data());
    auto* d = static_cast<char*>(dst.raw_data());
    const auto step = static_cast<ptrdiff_t>(item);
    for_each_strided(rows, src_rows, dst_rows, [&](int64_t, int64_t os, int64_t od) {
      std::memmove(d + static_cast<ptrdiff_t>(od) * step, s + static_cast<ptrdiff_t>(os) * step, row_bytes);
    });
    return;
  }
  dispatch_all(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src.raw_data());
    T* d = static_cast<T*>(dst.raw_data());
    for_each_strided(dst.shape(), src.strides(), dst.strides(),
                     [&](int64_t, int64_t os, int64_t od) { d[od] = s[os]; });
  });
}

void CpuBackend::cast(const Tensor& src, Tensor& dst) {
  dispatch_all(src.dtype(), [&](auto stag) {
    using S = decltype(stag);
    dispatch_all(dst.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      const S* s = static_cast<const S*>(src.raw_data());
      D* d = static_cast<D*>(dst.raw_data());
      const int64_t n = src.numel();
      for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
    });
  });
}

void CpuBackend::fill(Tensor& dst, double value) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst.raw_data());
    const T v = convert<T>(value);
    const int64_t n = dst.numel();
    for (int64_t i = 0; i < n; ++i) d[i] = v;
  });
}

void CpuBackend::arange(Tensor& dst, double start, double step) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst.raw_data());
    for (int64_t i = 0; i < dst.numel(); ++i) d[i] = convert<T>(start + static_cast<double>(i) * step);
  });
}

void CpuBackend::gather_rows(const Tensor& src, const Tensor& indices, Tensor& out) {
  const int64_t rows = out.shape()[0];
  const size_t row_bytes = static_cast<size_t>(rows == 0 ? 0 : out.numel() / rows) * dtype_size(out.dtype());
  const int64_t* idx = indices.data<int64_t>();
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(out.raw_data());
  for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * row_bytes, s + idx[r] * static_cast<int64_t>(row_bytes), row_bytes);
}

namespace {
// The largest value of T below `high` (high > low): where rounding lifted a draw onto high, the
// draw is pulled back inside [low, high), as for float32. For a 16-bit format the step is one
// unit of its encoding.
template <typename T>
T below(double high, double low) {
  if constexpr (is_half_v<T>) {
    const T h = convert<T>(high);
    const uint16_t bits = h.bits();
    // Moving toward low: a positive encoding steps down by one, a negative one steps up (its
    // magnitude grows); +0 steps to the smallest negative subnormal.
    if ((bits & 0x7fffu) == 0) return T::from_bits(0x8001);
    return T::from_bits(static_cast<uint16_t>((bits & 0x8000u) ? bits + 1 : bits - 1));
  } else {
    return std::nextafter(static_cast<T>(high), static_cast<T>(low));
  }
}
}  // namespace

// A 16-bit tensor draws float32 uniforms (the same counters) and rounds each one.
void CpuBackend::uniform(Tensor& dst, double low, double high, uint64_t seed, uint64_t offset) {
  dispatch_floating_and_half(dst.dtype(), "uniform", [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst.raw_data());
    const int64_t n = dst.numel();
    parallel_rows(n, n, [&](int64_t i) {
      const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(i));
      double u;
      if constexpr (std::is_same_v<T, double>) u = philox::uniform_double(b.x[0], b.x[1]);
      else u = philox::uniform_float(b);
      T v = convert<T>(low + (high - low) * u);
      // float and double compare in their own type (a draw equal to float(high) is pulled back
      // even where float(high) rounded below high); a 16-bit draw compares its value with high.
      const bool at_or_past = is_half_v<T> ? static_cast<double>(v) >= high : v >= convert<T>(high);
      if (at_or_past && high > low) v = below<T>(high, low);
      d[i] = v;
    });
  });
}

void CpuBackend::normal(Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset) {
  dispatch_floating_and_half(dst.dtype(), "normal", [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst.raw_data());
    const int64_t n = dst.numel();
    parallel_rows(n, n, [&](int64_t i) {
      // Box–Muller on two 53-bit uniforms from one block; u1 in (0, 1] keeps log finite.
      const philox::Block b = philox::block_for(seed, offset, static_cast<uint64_t>(i));
      const double u1 = 1.0 - philox::uniform_double(b.x[0], b.x[1]);
      const double u2 = philox::uniform_double(b.x[2], b.x[3]);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      d[i] = convert<T>(mean + stddev * z);
    });
  });
}

void CpuBackend::randint(Tensor& dst, int64_t low, int64_t high, uint64_t seed, uint64_t offset) {
  int64_t* d = dst.data<int64_t>();
  const auto range = static_cast<unsigned __int128>(static_cast<uint64_t>(high - low));
  const int64_t n = dst.numel();
  for (int64_t i = 0; i < n; ++i) {
    // Multiply-shift maps 64 random bits onto [0, range) (bias below 2^-64 · range).
    const uint64_t r = philox::bits64(philox::block_for(seed, offset, static_cast<uint64_t>(i)));
    d[i] = low + static_cast<int64_t>((static_cast<unsigned __int128>(r) * range) >> 64);
  }
}

// CPU memory comes from an aligned allocator that keeps freed blocks for reuse and counts them
// (core/storage.cpp, Note [the CPU allocator's counters]); "device allocations" are the
// allocations the system served.
MemoryStats CpuBackend::memory_stats() {
  const CpuAllocatorCounters c = cpu_allocator_counters();
  MemoryStats s;
  s.allocated_bytes = c.allocated_bytes;
  s.reserved_bytes = c.reserved_bytes;
  s.peak_allocated_bytes = c.peak_allocated_bytes;
  s.device_allocations = c.system_allocations;
  s.cache_hits = c.cache_hits;
  s.cache_flushes = c.cache_flushes;
  return s;
}
// The blocks above 1 MiB go back to the system; the small per-thread lists stay (at most
// 32 blocks per size class and thread).
void CpuBackend::empty_cache() { release_cached_cpu_blocks(); }
void CpuBackend::reset_peak_memory_stats() { reset_cpu_allocator_peak(); }

Backend& cpu_backend_instance() {
  static CpuBackend backend;
  return backend;
}

}  // namespace minidl::cpu

namespace minidl {
Backend& cpu_backend() { return cpu::cpu_backend_instance(); }
}  // namespace minidl
