// Shared by the DataParallel tests: a small clonable classifier, a fixed dataset whose batches
// include an uneven split and a last batch of one row, and parameter comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/nn.h"

namespace parallel_fixtures {

using namespace minidl;

// Linear 6 -> 8, ReLU, Linear 8 -> 8, ReLU, Linear 8 -> 3: six parameters.
struct Classifier : nn::Cloneable<Classifier> {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 8));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 8));
  std::shared_ptr<nn::Linear> fc3 = register_module("fc3", std::make_shared<nn::Linear>(8, 3));
  Tensor forward(const Tensor& x) override { return (*fc3)(ops::relu((*fc2)(ops::relu((*fc1)(x))))); }
  std::string name() const override { return "Classifier"; }
};

// 31 rows cut into batches 10, 10, 10, 1 (10 over 3 replicas is 4, 3, 3; the last uses one).
struct Batches {
  std::vector<Tensor> x, y;
};
inline Batches make_batches() {
  Generator g(42);
  Tensor x = randn({31, 6}, {}, &g);
  Tensor y = randint(0, 3, {31}, DType::Int64, &g);
  Batches b;
  for (int64_t start : {0, 10, 20, 30}) {
    const int64_t n = start == 30 ? 1 : 10;
    b.x.push_back(x.narrow(0, start, n).contiguous());
    b.y.push_back(y.narrow(0, start, n).contiguous());
  }
  return b;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(static_cast<double>(va[i]) - vb[i]));
  return m;
}

inline double max_param_diff(const nn::Module& a, const nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double m = 0;
  for (size_t i = 0; i < pa.size(); ++i) m = std::max(m, max_abs_diff(pa[i], pb[i]));
  return m;
}

inline bool bitwise_equal(const nn::Module& a, const nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i)
    if (pa[i].to_vector<float>() != pb[i].to_vector<float>()) return false;
  return true;
}

}  // namespace parallel_fixtures
