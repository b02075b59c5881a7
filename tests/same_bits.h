// check_same_bits: a Catch2 check that two tensors hold the same values bit for bit, for tests
// whose claim is exact equality (a fused op against the ops it replaces, one path against
// another). Both sides are widened to float64 on the CPU (exact for every floating dtype) and
// compared as bit patterns, so -0 and +0 differ and a NaN matches only a NaN of the same bits;
// the message counts the elements that differ and shows the first.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl::testing {

inline void check_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  REQUIRE(got.shape() == want.shape());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = got.to(Device::cpu()).to(DType::Float64).contiguous().to_vector<double>();
  const std::vector<double> w = want.to(Device::cpu()).to(DType::Float64).contiguous().to_vector<double>();
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &w[i], sizeof(double)) != 0 && differ++ == 0) first = i;
  INFO("elements that differ: " << differ << " of " << g.size() << "; first at " << first << ": "
                                << (g.empty() ? 0.0 : g[first]) << " vs " << (w.empty() ? 0.0 : w[first]));
  CHECK(differ == 0);
}

}  // namespace minidl::testing
