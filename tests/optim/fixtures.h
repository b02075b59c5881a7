// Shared inputs of the optimizer tests: a 3-element float64 parameter, five fixed gradients
// varied in sign and size, and the comparison against a hand-computed sequence.
#pragma once

#include <catch2/catch.hpp>
#include <vector>

#include "core/tensor.h"

namespace minidl::optim_testing {

inline Tensor param64(const std::vector<double>& values) {
  Tensor p = from_vector<double>(values);
  p.requires_grad_(true);
  return p;
}

inline const std::vector<std::vector<double>> kGrads = {
    {0.5, -1.0, 2.0}, {0.25, 0.75, -1.5}, {-0.3, 0.1, 0.9}, {1.2, -0.4, 0.0}, {0.05, 0.6, -2.2}};
inline const std::vector<double> kStart = {1.0, -2.0, 0.5};

// 1e-12: the kernel does the same double arithmetic as the hand-written rule but may order
// or fuse it differently (e.g. sqrt(v)/sqrt(1 - β2ᵗ)): a few ulps per step on O(1) values.
constexpr double kTol = 1e-12;

inline void check_close(const Tensor& t, const std::vector<double>& expected) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(kTol));
}

}  // namespace minidl::optim_testing
