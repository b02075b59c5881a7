// nn::Embedding (nn/embedding.*) and init::normal_: the weight [V, D] drawn from N(0, 1) as
// PyTorch does, reproducibly from a seed; the name, the forward, clone and the errors.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/ops/embedding.h"
#include "nn/nn.h"
#include "tests/error_message.h"

using namespace minidl;
using minidl::testing::error_message;

TEST_CASE("nn::Embedding draws its weight from the standard normal, reproducibly from a seed", "[nn]") {
  Generator g1(51), g2(51), g3(52);
  nn::Embedding a(100, 100, &g1), b(100, 100, &g2), c(100, 100, &g3);
  CHECK(a.weight.shape() == Shape{100, 100});
  CHECK(a.weight.dtype() == DType::Float32);
  CHECK(a.weight.requires_grad());
  CHECK(a.weight.to_vector<float>() == b.weight.to_vector<float>());
  CHECK(a.weight.to_vector<float>() != c.weight.to_vector<float>());
  double sum = 0, sq = 0;
  const std::vector<float> v = a.weight.to_vector<float>();
  for (float x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  for (float x : v) sq += (x - mean) * (x - mean);
  const double stddev = std::sqrt(sq / static_cast<double>(v.size()));
  // 10000 draws: the sample mean's standard error is 0.01 and the sample std's 0.007, so 0.05
  // is 5 and 7 standard errors (a false failure has probability below 1e-6).
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::abs(stddev - 1.0) < 0.05);
  CHECK(a.name() == "Embedding(100, 100)");
  CHECK_THROWS_WITH(nn::Embedding(0, 4), Catch::Contains("must be positive"));
}

TEST_CASE("init::normal_ scales and shifts the standard normal and refuses a negative std", "[nn]") {
  Generator g1(53), g2(53);
  Tensor a = empty({1000}), b = empty({1000});
  nn::init::normal_(a, 0.0, 1.0, &g1);
  nn::init::normal_(b, 3.0, 0.5, &g2);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  // The same draws: b = 3 + 0.5·a up to float32 rounding of the two operations.
  for (size_t i = 0; i < av.size(); ++i) CHECK(std::abs(bv[i] - (3.0 + 0.5 * av[i])) <= 1e-6 * (3.0 + std::abs(av[i])));
  CHECK_THROWS_WITH(nn::init::normal_(a, 0.0, -1.0), Catch::Contains("std >= 0"));
}

TEST_CASE("nn::Embedding forward looks rows up, trains its weight and clones", "[nn]") {
  Generator g(54);
  nn::Embedding emb(7, 4, &g);
  const Tensor idx = from_vector(std::vector<int64_t>{6, 0, 6}, {3}, DType::Int64);
  const Tensor out = emb(idx);
  CHECK(out.shape() == Shape{3, 4});
  CHECK(out.to_vector<float>() == ops::embedding(idx, emb.weight).to_vector<float>());
  out.sum().backward();
  const std::vector<float> grad = emb.weight.grad().to_vector<float>();
  for (size_t j = 0; j < 4; ++j) {
    CHECK(grad[j] == 1.0f);          // row 0: once
    CHECK(grad[6 * 4 + j] == 2.0f);  // row 6: twice
    CHECK(grad[3 * 4 + j] == 0.0f);  // row 3: never
  }
  const GeneratorState before = default_generator().state();
  auto copy = std::dynamic_pointer_cast<nn::Embedding>(emb.clone());
  REQUIRE(copy);
  CHECK(copy->weight.to_vector<float>() == emb.weight.to_vector<float>());
  CHECK(default_generator().state() == before);  // cloning draws nothing from the default generator
  const std::string m = error_message([&] { emb(from_vector(std::vector<int64_t>{7}, {1}, DType::Int64)); });
  CHECK_THAT(m, Catch::Contains("embedding: index 7") && Catch::Contains("[0, 7)"));
}
