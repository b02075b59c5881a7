// Tests for nn/sequential.* and nn/activation.*: ordering and names, and the fused
// Linear -> ReLU path matching the layers run apart, values and gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"

using namespace minidl;

TEST_CASE("Sequential registers children as 0, 1, 2 and indexes them", "[nn]") {
  auto lin0 = std::make_shared<nn::Linear>(4, 3);
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential seq({lin0, relu});
  seq.push_back(std::make_shared<nn::Linear>(3, 2));
  CHECK(seq.size() == 3);
  CHECK(seq[0] == lin0);
  CHECK(seq[1] == relu);
  std::vector<std::string> names;
  for (const auto& [n, t] : seq.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(seq(zeros(Shape{5, 4})).shape() == Shape{5, 2});
  CHECK_THROWS_WITH(seq[3], Catch::Contains("index 3 is out of range for 3 modules"));
  CHECK_THROWS_WITH(seq.push_back(nullptr), Catch::Contains("null module"));
}

TEST_CASE("Sequential fused linear+relu gives the same values and gradients as unfused", "[nn]") {
  Generator gen(123);
  auto fc1 = std::make_shared<nn::Linear>(6, 8, true, &gen);
  auto fc2 = std::make_shared<nn::Linear>(8, 3, true, &gen);
  nn::Sequential seq({fc1, std::make_shared<nn::ReLU>(), fc2, std::make_shared<nn::ReLU>()});
  const Tensor x = randn(Shape{5, 6}, {}, &gen);

  const Tensor fused = seq(x);
  // Both ReLUs ran inside the linears' epilogues: the last node is the linear's.
  REQUIRE(fused.grad_fn() != nullptr);
  CHECK(fused.grad_fn()->name() == "LinearBackward");
  fused.sum().backward();
  std::vector<std::vector<float>> fused_grads;
  for (const auto& p : seq.parameters()) fused_grads.push_back(p.grad().to_vector<float>());
  seq.zero_grad();

  const Tensor unfused = ops::relu(ops::linear(ops::relu(ops::linear(x, fc1->weight, fc1->bias)), fc2->weight, fc2->bias));
  unfused.sum().backward();
  // The fused epilogue applies max(0, ·) to the same GEMM result: equality is exact.
  CHECK(fused.to_vector<float>() == unfused.to_vector<float>());
  const auto params = seq.parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(params[i].grad().to_vector<float>() == fused_grads[i]);
  // Some activations were clipped, so the relu mattered.
  const std::vector<float> hidden = ops::linear(x, fc1->weight, fc1->bias).to_vector<float>();
  CHECK(std::any_of(hidden.begin(), hidden.end(), [](float v) { return v < 0; }));
}

TEST_CASE("ReLU clips negatives and Flatten keeps the batch dim", "[nn]") {
  nn::ReLU relu;
  CHECK(relu(from_vector<float>({-1, 0, 2.5f})).to_vector<float>() == std::vector<float>{0, 0, 2.5f});
  nn::Flatten flatten;
  CHECK(flatten(zeros(Shape{2, 3, 4})).shape() == Shape{2, 12});
  nn::Flatten all(0);
  CHECK(all(zeros(Shape{2, 3, 4})).shape() == Shape{24});
}
