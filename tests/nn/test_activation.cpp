// nn::GELU (nn/activation.*): the form chosen by enum or by PyTorch's name, its name, the
// forward through ops::gelu, clone, and the error for an unknown form.
#include <catch2/catch.hpp>

#include "core/ops/gelu.h"
#include "nn/nn.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

TEST_CASE("nn::GELU computes ops::gelu in the form given by enum or by PyTorch's name", "[nn]") {
  Generator g(61);
  const Tensor x = uniform({4, 5}, -3.0, 3.0, {}, &g);
  nn::GELU exact, tanh_form("tanh"), tanh_enum(GeluApproximate::Tanh);
  CHECK(exact.approximate() == GeluApproximate::None);
  CHECK(exact.name() == "GELU(approximate='none')");
  CHECK(tanh_form.name() == "GELU(approximate='tanh')");
  CHECK(exact(x).to_vector<float>() == ops::gelu(x).to_vector<float>());
  CHECK(tanh_form(x).to_vector<float>() == ops::gelu(x, GeluApproximate::Tanh).to_vector<float>());
  CHECK(tanh_enum(x).to_vector<float>() == tanh_form(x).to_vector<float>());
  auto copy = std::dynamic_pointer_cast<nn::GELU>(tanh_form.clone());
  REQUIRE(copy);
  CHECK(copy->approximate() == GeluApproximate::Tanh);
  CHECK_THAT(error_message([] { nn::GELU bad("erf"); }),
             Catch::Contains("'none' or 'tanh'") && Catch::Contains("'erf'"));
}
