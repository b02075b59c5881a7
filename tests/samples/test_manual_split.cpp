// samples/manual_split's step (samples/manual_split/split_step.h): the gradient accumulated
// chunk by chunk, each loss scaled by its share, equals the full-batch gradient — for even and
// uneven chunks — while the tutorial's unscaled losses give k times it; chunk_rows never
// divides by zero and never makes an extra chunk.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/ops.h"
#include "nn/nn.h"
#include "samples/common/seed_model.h"
#include "samples/manual_split/split_step.h"

using namespace minidl;
using samples::SimpleModel;

namespace {
double max_grad_diff(const nn::Module& a, const nn::Module& b, double scale_b = 1.0) {
  auto pa = a.parameters(), pb = b.parameters();
  double m = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    auto ga = pa[i].grad().to_vector<float>(), gb = pb[i].grad().to_vector<float>();
    for (size_t k = 0; k < ga.size(); ++k) m = std::max(m, std::abs(ga[k] - scale_b * gb[k]));
  }
  return m;
}
}  // namespace

TEST_CASE("manual_split's scaled chunk gradients add up to the full-batch gradient", "[samples][manual_split]") {
  manual_seed(2);
  SimpleModel full;
  Generator g(9);
  Tensor x = randn({10, 10}, {}, &g);
  Tensor y = randint(0, 2, {10}, DType::Int64, &g);
  nn::CrossEntropyLoss criterion;
  Tensor full_loss = criterion(full(x), y);
  full_loss.backward();

  for (int64_t chunks : {1, 2, 3, 4, 10}) {  // 3 and 4 give uneven chunks: 4, 4, 2 and 3, 3, 3, 1
    INFO("chunks = " << chunks);
    auto split = full.clone();
    const int64_t rows = manual_split::chunk_rows(10, chunks);
    const double loss = manual_split::backward_in_chunks(*split, criterion, x, y, rows);
    // float32: the same rows summed in other groupings; measured differences are ~1e-8.
    CHECK(max_grad_diff(full, *split) < 1e-6);
    CHECK(std::abs(loss - full_loss.item()) < 1e-6);
  }

  // The tutorial's version: unscaled chunk losses sum the chunk means, k times the gradient.
  auto unscaled = full.clone();
  const std::vector<Tensor> xs = x.split(5), ys = y.split(5);
  for (size_t c = 0; c < xs.size(); ++c) criterion((*unscaled)(xs[c]), ys[c]).backward();
  CHECK(max_grad_diff(full, *unscaled, 0.5) < 1e-6);  // two chunks: twice the full-batch gradient
  CHECK(max_grad_diff(full, *unscaled) > 1e-3);
}

TEST_CASE("manual_split's chunk rows never divide by zero nor add a chunk", "[samples][manual_split]") {
  CHECK(manual_split::chunk_rows(10, 3) == 4);  // 4, 4, 2: three chunks (10 // 3 = 3 would make four)
  CHECK(manual_split::chunk_rows(10, 0) == 10);  // no devices: one chunk, not a division by zero
  CHECK(manual_split::chunk_rows(3, 8) == 1);
  CHECK(manual_split::chunk_rows(10, 2) == 5);
}
