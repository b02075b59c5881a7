// nn::LayerNorm (nn/layer_norm.*): PyTorch's parameters (weight 1, bias 0, or none), its
// name, the forward through ops::layer_norm, clone, and the shape errors.
#include <catch2/catch.hpp>

#include "core/ops/layer_norm.h"
#include "nn/nn.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

TEST_CASE("nn::LayerNorm has weight ones and bias zeros of size D, or none without elementwise_affine", "[nn]") {
  nn::LayerNorm ln(6);
  CHECK(ln.weight.to_vector<float>() == std::vector<float>(6, 1.0f));
  CHECK(ln.bias.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(ln.parameters().size() == 2);
  CHECK(ln.named_buffers().empty());
  CHECK(ln.eps() == 1e-5);
  CHECK(ln.name() == "LayerNorm(6, eps=1e-05, elementwise_affine=true)");
  nn::LayerNorm plain(6, 1e-6, /*elementwise_affine=*/false);
  CHECK(plain.parameters().empty());
  CHECK_FALSE(plain.weight.defined());
  CHECK(plain.name() == "LayerNorm(6, eps=1e-06, elementwise_affine=false)");
  nn::LayerNorm no_bias(6, 1e-5, true, /*bias=*/false);
  CHECK(no_bias.parameters().size() == 1);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.name() == "LayerNorm(6, eps=1e-05, elementwise_affine=true, bias=false)");
  CHECK_THROWS_WITH(nn::LayerNorm(0), Catch::Contains("normalized_shape must be positive"));
  CHECK_THROWS_WITH(nn::LayerNorm(3, -1.0), Catch::Contains("eps >= 0"));
}

TEST_CASE("nn::LayerNorm forward is ops::layer_norm with its parameters and trains them", "[nn]") {
  Generator g(41);
  nn::LayerNorm ln(5, 1e-3);
  ln.weight.copy_(uniform({5}, -1.0, 1.0, {}, &g));
  ln.bias.copy_(uniform({5}, -1.0, 1.0, {}, &g));
  const Tensor x = uniform({2, 3, 5}, -2.0, 2.0, {}, &g);
  const Tensor y = ln(x);
  CHECK(y.to_vector<float>() == ops::layer_norm(x, ln.weight, ln.bias, 1e-3).to_vector<float>());
  y.sum().backward();
  CHECK(ln.weight.grad().shape() == Shape{5});
  CHECK(ln.bias.grad().to_vector<float>() == std::vector<float>(5, 6.0f));  // Σ over 6 rows of dy = 1
  // clone: same values in new storage.
  auto copy = std::dynamic_pointer_cast<nn::LayerNorm>(ln.clone());
  REQUIRE(copy);
  CHECK(copy->weight.to_vector<float>() == ln.weight.to_vector<float>());
  CHECK_FALSE(copy->weight.storage().data() == ln.weight.storage().data());
  CHECK(copy->name() == ln.name());
}

TEST_CASE("nn::LayerNorm names itself and the expected last dim when the input does not fit", "[nn][errors]") {
  nn::LayerNorm ln(5);
  const std::string m = error_message([&] { ln(zeros({2, 4})); });
  CHECK_THAT(m, Catch::Contains("LayerNorm(5") && Catch::Contains("last dim 5") && Catch::Contains("[2, 4]"));
}
