// dropout (core/ops/dropout): the kept fraction within a stated statistical bound, the
// inverted scaling, the same mask for the same generator state, the identity in evaluation
// and for p = 0, zeros for p = 1, a gradient that is the same mask, and the rows of a sliced
// batch.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/ops/dropout.h"
#include "tests/core/gradcheck.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

TEST_CASE("dropout keeps a fraction 1 - p of the elements, scaled by 1/(1 - p)", "[core][dropout]") {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5, 0.8}) {
    Generator g(42);
    const auto y = ops::dropout(ones({n}), p, true, &g).to_vector<float>();
    int64_t kept = 0;
    for (float v : y) {
      if (v != 0) {
        ++kept;
        CHECK(v == Approx(1.0 / (1.0 - p)).epsilon(1e-6));  // float32 rounding of 1/(1 - p)
      }
    }
    // kept ~ Binomial(n, 1 - p), standard deviation sqrt(n p (1 - p)) <= 224 here; 6 standard
    // deviations fail a correct implementation with probability about 2e-9.
    const double sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
    INFO("p = " << p << ", kept " << kept << " of " << n);
    CHECK(std::abs(static_cast<double>(kept) - static_cast<double>(n) * (1 - p)) <= 6 * sd);
  }
}

TEST_CASE("dropout draws the same mask from the same generator state and another from the next", "[core][dropout]") {
  Generator a(7), b(7);
  const Tensor x = ones({1000});
  const auto first = ops::dropout(x, 0.5, true, &a).to_vector<float>();
  CHECK(ops::dropout(x, 0.5, true, &b).to_vector<float>() == first);
  CHECK(ops::dropout(x, 0.5, true, &a).to_vector<float>() != first);  // the generator advanced
}

TEST_CASE("dropout is the identity in evaluation and for p = 0, and zeros for p = 1", "[core][dropout]") {
  Generator g(3);
  const Tensor x = minidl::testing::rand64({4, 5}, g);
  CHECK(ops::dropout(x, 0.7, false).same(x));
  CHECK(ops::dropout(x, 0.0, true).same(x));
  const GeneratorState before = g.state();
  ops::dropout(x, 0.7, false, &g);
  CHECK(g.state() == before);  // evaluation draws nothing
  const auto zeros_out = ops::dropout(x, 1.0, true, &g).to_vector<double>();
  for (double v : zeros_out) CHECK(v == 0);
}

TEST_CASE("dropout's gradient is the same mask", "[core][dropout]") {
  Generator g(11), gx(12);
  Tensor x = minidl::testing::rand64({3, 7}, gx).requires_grad_();
  const Tensor y = ops::dropout(x, 0.4, true, &g);
  y.backward(ones({3, 7}, DType::Float64));
  const auto yv = y.to_vector<double>(), xv = x.to_vector<double>(), gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) {
    const double mask = gv[i];
    CHECK((mask == 0 || std::abs(mask - 1 / 0.6) <= 1e-15));
    CHECK(yv[i] == xv[i] * mask);
  }
}

TEST_CASE("dropout rejects a probability outside [0, 1]", "[core][dropout][errors]") {
  const std::string m = error_message([] { ops::dropout(ones({2, 3}), 1.5); });
  CHECK_THAT(m, Catch::Contains("dropout") && Catch::Contains("[0, 1]") && Catch::Contains("1.5") &&
                    Catch::Contains("[2, 3]"));
}

// Note [random draws of a batch shard] (core/generator.h): under a BatchRowsGuard each shard
// of a batch gets exactly its rows of the whole batch's mask, and the generator advances as for
// the whole batch, whatever the shard.
TEST_CASE("dropout under batch rows draws those rows of the whole batch's mask", "[core][dropout]") {
  const int64_t total = 13, cols = 37;  // uneven: shards of 6 and 7 rows
  Generator whole_gen(5);
  const auto whole = ops::dropout(ones({total, cols}), 0.5, true, &whole_gen).to_vector<float>();
  for (const BatchRows slice : {BatchRows{0, 6, total}, BatchRows{6, 7, total}, BatchRows{4, 1, total},
                                 BatchRows{13, 0, total}}) {
    INFO("rows [" << slice.begin << ", " << slice.begin + slice.rows << ") of " << total);
    Generator g(5);
    std::vector<float> part;
    {
      BatchRowsGuard guard(slice);
      part = ops::dropout(ones({slice.rows, cols}), 0.5, true, &g).to_vector<float>();
    }
    const std::vector<float> expected(whole.begin() + slice.begin * cols,
                                      whole.begin() + (slice.begin + slice.rows) * cols);
    CHECK(part == expected);
    CHECK(g.state() == whole_gen.state());  // every slice advances it alike, an empty one too
  }
  // Without the guard, or with a tensor whose first dimension is not the shard's rows, the draw
  // is the tensor's own.
  Generator plain(5), other(5);
  const auto first_rows = ops::dropout(ones({6, cols}), 0.5, true, &plain).to_vector<float>();
  CHECK(first_rows == std::vector<float>(whole.begin(), whole.begin() + 6 * cols));
  CHECK(plain.state().offset == 6 * cols);
  {
    BatchRowsGuard guard(BatchRows{6, 7, total});
    (void)ops::dropout(ones({5, cols}), 0.5, true, &other);
  }
  CHECK(other.state().offset == 5 * cols);
  CHECK(current_batch_rows() == nullptr);  // the guard restored "no rows"
}

TEST_CASE("batch rows outside their batch are an error naming them", "[core][dropout][errors]") {
  CHECK_THAT(error_message([] { BatchRowsGuard guard(BatchRows{10, 4, 13}); }),
             Catch::Contains("[10, 14)") && Catch::Contains("13 rows"));
  CHECK_THAT(error_message([] { BatchRowsGuard guard(BatchRows{-1, 2, 13}); }), Catch::Contains("[-1, 1)"));
  BatchRowsGuard outer(BatchRows{0, 2, 4});
  {
    BatchRowsGuard inner(BatchRows{2, 2, 4});
    CHECK(current_batch_rows()->begin == 2);
  }
  CHECK(current_batch_rows()->begin == 0);  // nested guards restore the outer rows
}
