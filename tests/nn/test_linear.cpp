// Tests for nn/linear.* and nn/init.*: PyTorch's default init bounds and determinism, the
// forward against hand math, inputs of other ranks, gradients and the shape errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"
#include "tests/error_message.h"

using namespace minidl;

TEST_CASE("Linear has weight out x in and bias of size out, or no bias when asked", "[nn]") {
  nn::Linear with_bias(4, 3);
  CHECK(with_bias.weight.shape() == Shape{3, 4});
  CHECK(with_bias.bias.shape() == Shape{3});
  CHECK(with_bias.parameters().size() == 2);
  CHECK(with_bias.weight.dtype() == DType::Float32);
  nn::Linear no_bias(4, 3, /*bias=*/false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
  CHECK(no_bias.name() == "Linear(in_features=4, out_features=3, bias=false)");
  CHECK_THROWS_WITH(nn::Linear(0, 3), Catch::Contains("must be positive"));
}

TEST_CASE("Linear init draws weight and bias within plus or minus 1/sqrt(in_features)", "[nn]") {
  Generator gen(7);
  nn::Linear lin(100, 50, true, &gen);
  const double bound = 1.0 / std::sqrt(100.0);
  // 1e-6 relative slack: the bound is rounded to float32 when the values are drawn.
  const double limit = bound * (1 + 1e-6);
  for (const Tensor& t : {lin.weight, lin.bias}) {
    const std::vector<float> v = t.to_vector<float>();
    double max_abs = 0;
    for (float x : v) max_abs = std::max(max_abs, std::abs(static_cast<double>(x)));
    CHECK(max_abs <= limit);
    CHECK(std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) != v.end());  // not all equal
  }
  // 5000 uniform draws reach near the ends of the range (fails with probability ~1e-200).
  double max_w = 0;
  for (float x : lin.weight.to_vector<float>()) max_w = std::max(max_w, std::abs(static_cast<double>(x)));
  CHECK(max_w > 0.99 * bound);
}

TEST_CASE("Linear init is reproducible from a seed, and the weight is drawn before the bias", "[nn]") {
  Generator g1(42), g2(42), g3(43), g4(42);
  nn::Linear a(10, 5, true, &g1), b(10, 5, true, &g2), c(10, 5, true, &g3), no_bias(10, 5, false, &g4);
  CHECK(a.weight.to_vector<float>() == b.weight.to_vector<float>());
  CHECK(a.bias.to_vector<float>() == b.bias.to_vector<float>());
  CHECK(a.weight.to_vector<float>() != c.weight.to_vector<float>());
  CHECK(a.weight.to_vector<float>() == no_bias.weight.to_vector<float>());
  // The default generator, reseeded, gives the same model too.
  manual_seed(5);
  nn::Linear d(10, 5);
  manual_seed(5);
  nn::Linear e(10, 5);
  CHECK(d.weight.to_vector<float>() == e.weight.to_vector<float>());
}

TEST_CASE("kaiming_uniform_ bound follows the gain for other negative slopes", "[nn]") {
  Generator gen(3);
  Tensor w = empty(Shape{64, 16});
  nn::init::kaiming_uniform_(w, /*a=*/0.0, &gen);  // gain sqrt(2): bound sqrt(6 / 16)
  const double bound = std::sqrt(6.0 / 16.0);
  double max_abs = 0;
  for (float x : w.to_vector<float>()) max_abs = std::max(max_abs, std::abs(static_cast<double>(x)));
  CHECK(max_abs <= bound * (1 + 1e-6));  // slack: float32 rounding of the bound
  CHECK(max_abs > 0.9 * bound);
  CHECK(nn::init::fan_in(empty(Shape{4, 3, 2})) == 6);
  CHECK_THROWS_WITH(nn::init::fan_in(empty(Shape{4})), Catch::Contains("rank >= 2"));
}

TEST_CASE("Linear forward equals x times W transposed plus b computed by hand", "[nn]") {
  nn::Linear lin(3, 2);
  lin.weight.copy_(from_vector<float>({1, -2, 0.5f, 0, 3, -1}, Shape{2, 3}));  // [out=2, in=3]
  lin.bias.copy_(from_vector<float>({0.25f, -1}, Shape{2}));
  const Tensor x = from_vector<float>({1, 2, 3, -1, 0, 4}, Shape{2, 3});  // [N=2, in=3]
  const Tensor y = lin(x);                                                 // [2, 2]
  REQUIRE(y.shape() == Shape{2, 2});
  // Every value is a small multiple of 1/4, so float32 holds each product and sum exactly.
  const std::vector<float> expected = {1 - 4 + 1.5f + 0.25f, 0 + 6 - 3 - 1, -1 + 0 + 2 + 0.25f, 0 + 0 - 4 - 1};
  CHECK(y.to_vector<float>() == expected);
}

TEST_CASE("Linear forward flattens leading dims of rank-1 and rank-3 inputs", "[nn]") {
  Generator gen(11);
  nn::Linear lin(4, 3, true, &gen);
  const Tensor x = randn(Shape{2, 3, 4}, {}, &gen);
  const Tensor y = lin(x);
  REQUIRE(y.shape() == Shape{2, 3, 3});
  const Tensor flat = lin(x.reshape(Shape{6, 4}));
  CHECK(y.reshape(Shape{6, 3}).to_vector<float>() == flat.to_vector<float>());
  const Tensor row = lin(x.reshape(Shape{6, 4}).narrow(0, 0, 1).reshape(Shape{4}));
  REQUIRE(row.shape() == Shape{3});
  CHECK(row.to_vector<float>() == flat.narrow(0, 0, 1).reshape(Shape{3}).to_vector<float>());
}

TEST_CASE("Linear forward with the wrong last dim names the layer and the shapes", "[nn]") {
  nn::Linear lin(10, 5);
  CHECK_THROWS_WITH(lin(zeros(Shape{3, 7})),
                    Catch::Contains("Linear(in_features=10, out_features=5, bias=true): linear: expected x with "
                                    "last dim 10 (the in_features of weight [5, 10]), got x [3, 7]"));
  CHECK_THROWS_AS(lin(scalar_tensor(1.0)), Error);
}

TEST_CASE("a wrong in_features gives the op's message from the module, functional::linear and ops::linear",
          "[nn]") {
  // ops::linear holds the one check; the others call it, and the module only adds its name.
  nn::Linear lin(10, 5);
  const Tensor x = zeros(Shape{3, 7});
  const std::string op = testing::error_message([&] { ops::linear(x, lin.weight, lin.bias); });
  CHECK(op == "linear: expected x with last dim 10 (the in_features of weight [5, 10]), got x [3, 7]");
  CHECK(testing::error_message([&] { nn::functional::linear(x, lin.weight, lin.bias); }) == op);
  CHECK(testing::error_message([&] { nn::functional::linear_relu(x, lin.weight, lin.bias); }) == op);
  CHECK(testing::error_message([&] { lin(x); }) == lin.name() + ": " + op);
  CHECK(testing::error_message([&] { lin.forward_relu(x); }) == lin.name() + ": " + op);
}

TEST_CASE("Linear backward gives weight and bias gradients of a summed output", "[nn]") {
  nn::Linear lin(3, 2);
  const Tensor x = from_vector<float>({1, 2, 3, -1, 0, 4}, Shape{2, 3});
  lin(x).sum().backward();
  // d(sum y)/dW[o, i] = sum_n x[n, i]; d(sum y)/db[o] = N. Exact: small integers.
  CHECK(lin.weight.grad().to_vector<float>() == std::vector<float>{0, 2, 7, 0, 2, 7});
  CHECK(lin.bias.grad().to_vector<float>() == std::vector<float>{2, 2});
}
