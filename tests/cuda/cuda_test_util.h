// Helpers of the CUDA tests: fresh random inputs made on the CPU and copied to cuda:0, and
// comparisons of a CUDA result with the CPU reference under a stated tolerance.
//
// Two traps every test here avoids (both were caught on a GPU):
//   - `to()` and `contiguous()` return the tensor itself when nothing changes, so a reference
//     computed on the CPU from `x.to(Device::cpu())` shares storage with a CPU tensor `x`; a
//     step that updates in place then changes both. Take a `clone()` where a side mutates.
//   - C++ leaves the order in which a call's arguments are evaluated unspecified: compute the
//     result under test and its reference into named variables, in order, before comparing.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/cuda/gemm/gemm_impl.h"

namespace minidl::cuda_test {

inline const Device kGpu = Device::cuda(0);

// cuda:0's streaming multiprocessors (the GEMM plans depend on them).
inline int device_sm_count() {
  int sms = 0;
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  return sms;
}

// Uniform in [lo, hi) on the CPU from its own seeded generator (fresh per test and per seed).
inline Tensor random_cpu(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator g(seed);
  return rand(shape, TensorOptions(DType::Float32, Device::cpu()), &g) * (hi - lo) + lo;
}

// Whether a pair with a non-finite member matches: NaN only NaN, +inf only +inf, -inf only -inf.
inline bool same_nonfinite(float got, float want) {
  return std::isnan(got) ? std::isnan(want) : got == want;  // == tells the infinities apart by sign
}

// max |a - b| <= atol + rtol · |b| elementwise, b the CPU reference; reports the worst element.
// A non-finite value must be met by the same value (same_nonfinite).
inline void check_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  INFO(what << ": shape " << got.shape() << " vs " << want.shape());
  REQUIRE(got.shape() == want.shape());
  const std::vector<float> a = got.to(Device::cpu()).to(DType::Float32).to_vector<float>();
  const std::vector<float> b = want.to(Device::cpu()).to(DType::Float32).to_vector<float>();
  size_t worst = 0, nonfinite_mismatches = 0, first_mismatch = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      if (!same_nonfinite(a[i], b[i]) && nonfinite_mismatches++ == 0) first_mismatch = i;
      continue;
    }
    const double excess = std::abs(static_cast<double>(a[i]) - b[i]) - (atol + rtol * std::abs(static_cast<double>(b[i])));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  INFO("worst element " << worst << ": got " << (a.empty() ? 0.f : a[worst]) << ", want " << (b.empty() ? 0.f : b[worst]));
  std::ostringstream nonfinite;  // said only when there is one, so a finite failure reads plainly
  if (nonfinite_mismatches > 0)
    nonfinite << nonfinite_mismatches << " non-finite element(s) not matched by the same value; the first, "
              << first_mismatch << ": got " << a[first_mismatch] << ", want " << b[first_mismatch];
  INFO(nonfinite.str());
  CHECK(nonfinite_mismatches == 0);
  CHECK(worst_excess <= 0.0);
}

inline void check_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  if (got.dtype() == DType::Int64)
    CHECK(got.to(Device::cpu()).to_vector<int64_t>() == want.to(Device::cpu()).to_vector<int64_t>());
  else
    CHECK(got.to(Device::cpu()).to_vector<float>() == want.to(Device::cpu()).to_vector<float>());
}

// Sets the GEMM implementation (hand-written or cuBLAS) for a scope and restores the previous one.
class GemmImplScope {
 public:
  explicit GemmImplScope(GemmImpl impl) : previous_(gemm_impl()) { set_gemm_impl(impl); }
  ~GemmImplScope() { set_gemm_impl(previous_); }
  GemmImplScope(const GemmImplScope&) = delete;
  GemmImplScope& operator=(const GemmImplScope&) = delete;

 private:
  GemmImpl previous_;
};

}  // namespace minidl::cuda_test
