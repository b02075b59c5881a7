// Tests for nn/module.*: registration and dotted names, state dicts (round trip and each
// load error), zero_grad, train/eval, in-place device moves.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "nn/nn.h"
#include "samples/common/seed_model.h"

using namespace minidl;
using samples::SimpleModel;  // the seed tutorial's model: fc1 (10 -> 5), ReLU, fc2 (5 -> 2)

namespace {

template <typename T>
std::vector<std::string> names_of(const std::vector<std::pair<std::string, T>>& named) {
  std::vector<std::string> names;
  for (const auto& [n, t] : named) names.push_back(n);
  return names;
}

bool same_values(const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); }

}  // namespace

TEST_CASE("named_parameters gives dotted names in registration order", "[nn]") {
  SimpleModel model;
  const auto named = model.named_parameters();
  CHECK(names_of(named) == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(named[0].second.shape() == Shape{5, 10});
  CHECK(named[1].second.shape() == Shape{5});
  CHECK(named[2].second.shape() == Shape{2, 5});
  CHECK(named[3].second.shape() == Shape{2});
  const auto params = model.parameters();
  REQUIRE(params.size() == 4);
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].same(named[i].second));
    CHECK(params[i].requires_grad());
    CHECK(params[i].is_leaf());
  }
  CHECK(params[0].same(model.fc1->weight));
  CHECK(names_of(model.named_children()) == std::vector<std::string>{"fc1", "relu", "fc2"});
}

TEST_CASE("nested modules prefix their names and a shared parameter is listed once", "[nn]") {
  struct Outer : nn::Module {
    std::shared_ptr<nn::Sequential> net;
    std::shared_ptr<nn::Linear> head;
    Outer() {
      net = register_module("net", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                       std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>()}));
      head = register_module("head", std::make_shared<nn::Linear>(4, 1, false));
      register_module("head_again", head);  // the same module under a second name
      register_parameter("scale", ones(Shape{1}));
    }
  } outer;
  CHECK(names_of(outer.named_parameters()) == std::vector<std::string>{"scale", "net.0.weight", "net.0.bias", "head.weight"});
  // state_dict keeps every name, like PyTorch.
  const auto sd = outer.state_dict();
  CHECK(sd.size() == 5);
  CHECK(sd.count("head_again.weight") == 1);
}

TEST_CASE("buffers are saved in state_dict but are not parameters", "[nn]") {
  struct WithBuffer : nn::Module {
    WithBuffer() {
      register_parameter("w", zeros(Shape{2}));
      register_buffer("running_mean", full(Shape{3}, 7.0));
    }
  } m;
  CHECK(names_of(m.named_parameters()) == std::vector<std::string>{"w"});
  CHECK(names_of(m.named_buffers()) == std::vector<std::string>{"running_mean"});
  CHECK_FALSE(m.named_buffers()[0].second.requires_grad());
  const auto sd = m.state_dict();
  REQUIRE(sd.count("running_mean") == 1);
  CHECK(sd.at("running_mean").to_vector<float>() == std::vector<float>{7, 7, 7});
}

TEST_CASE("registering a bad or duplicate name throws a clear error", "[nn]") {
  nn::Module m;
  m.register_parameter("w", zeros(Shape{2}));
  CHECK_THROWS_WITH(m.register_parameter("w", zeros(Shape{2})), Catch::Contains("'w'") && Catch::Contains("already taken"));
  CHECK_THROWS_WITH(m.register_buffer("w", zeros(Shape{2})), Catch::Contains("already taken"));
  CHECK_THROWS_WITH(m.register_parameter("a.b", zeros(Shape{2})), Catch::Contains("must not contain '.'"));
  CHECK_THROWS_WITH(m.register_parameter("", zeros(Shape{2})), Catch::Contains("must not be empty"));
  CHECK_THROWS_WITH(m.register_parameter("idx", zeros(Shape{2}, DType::Int64)), Catch::Contains("int64"));
  CHECK_THROWS_WITH(m.register_module("child", std::shared_ptr<nn::Linear>()), Catch::Contains("null module"));
}

TEST_CASE("a module without forward says so when called", "[nn]") {
  nn::Module m;
  CHECK_THROWS_WITH(m(zeros(Shape{1})), Catch::Contains("Module Module: forward not implemented"));
}

TEST_CASE("state_dict round trip copies values in place into another model", "[nn]") {
  Generator gen_a(1), gen_b(2);
  SimpleModel a(&gen_a), b(&gen_b);
  REQUIRE_FALSE(same_values(a.fc1->weight, b.fc1->weight));
  const Tensor b_weight_handle = b.fc1->weight;
  const auto sd = a.state_dict();
  CHECK(sd.size() == 4);
  b.load_state_dict(sd);
  for (const auto& [n, t] : a.named_parameters()) {
    INFO(n);
    const auto b_named = b.named_parameters();
    for (const auto& [bn, bt] : b_named)
      if (bn == n) CHECK(same_values(t, bt));
  }
  CHECK(b.fc1->weight.same(b_weight_handle));  // same tensor object, new values
  CHECK(b.fc1->weight.requires_grad());
  CHECK(b.fc1->weight.is_leaf());
  // The loaded values are copies: changing a afterwards leaves b alone.
  a.fc1->weight.fill_(0.0);
  CHECK_FALSE(same_values(a.fc1->weight, b.fc1->weight));
}

TEST_CASE("load_state_dict names missing keys and loads nothing", "[nn]") {
  Generator gen_a(1), gen_b(2);
  SimpleModel a(&gen_a), b(&gen_b);
  const std::vector<float> before = b.fc1->weight.to_vector<float>();
  auto sd = a.state_dict();
  sd.erase("fc2.bias");
  sd.erase("fc1.weight");
  CHECK_THROWS_WITH(b.load_state_dict(sd), Catch::Contains("missing keys: fc1.weight, fc2.bias"));
  CHECK(b.fc1->weight.to_vector<float>() == before);
  CHECK_FALSE(same_values(a.fc1->bias, b.fc1->bias));  // fc1.bias was present but nothing loads on error
}

TEST_CASE("load_state_dict names unexpected keys", "[nn]") {
  SimpleModel a, b;
  auto sd = a.state_dict();
  sd["fc3.weight"] = zeros(Shape{2, 2});
  CHECK_THROWS_WITH(b.load_state_dict(sd), Catch::Contains("unexpected keys: fc3.weight"));
}

TEST_CASE("load_state_dict names each mis-shaped key with both shapes", "[nn]") {
  SimpleModel a, b;
  auto sd = a.state_dict();
  sd["fc1.weight"] = zeros(Shape{10, 5});
  CHECK_THROWS_WITH(b.load_state_dict(sd), Catch::Contains("fc1.weight: expected shape [5, 10], got [10, 5]"));
  // Non-strict loading still refuses a wrong shape.
  CHECK_THROWS_WITH(b.load_state_dict(sd, /*strict=*/false), Catch::Contains("fc1.weight: expected shape [5, 10]"));
}

TEST_CASE("non-strict load_state_dict loads the keys it knows and ignores the rest", "[nn]") {
  Generator gen_a(1), gen_b(2);
  SimpleModel a(&gen_a), b(&gen_b);
  auto sd = a.state_dict();
  sd.erase("fc2.weight");
  sd["extra"] = zeros(Shape{1});
  const std::vector<float> fc2_before = b.fc2->weight.to_vector<float>();
  b.load_state_dict(sd, /*strict=*/false);
  CHECK(same_values(a.fc1->weight, b.fc1->weight));
  CHECK(b.fc2->weight.to_vector<float>() == fc2_before);
}

TEST_CASE("zero_grad sets every parameter's grad to undefined", "[nn]") {
  SimpleModel model;
  Tensor loss = model(ones(Shape{3, 10})).sum();
  loss.backward();
  for (const auto& p : model.parameters()) REQUIRE(p.grad().defined());
  model.zero_grad();
  for (const auto& p : model.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("train and eval set the flag on the whole tree", "[nn]") {
  SimpleModel model;
  CHECK(model.is_training());
  model.eval();
  CHECK_FALSE(model.is_training());
  CHECK_FALSE(model.fc1->is_training());
  CHECK_FALSE(model.relu->is_training());
  model.train();
  CHECK(model.fc2->is_training());
  model.train(false);
  CHECK_FALSE(model.fc2->is_training());
}

TEST_CASE("Module::to keeps the same tensor objects and throws before moving to a missing device", "[nn]") {
  SimpleModel model;
  const auto before = model.parameters();
  const std::vector<float> values = model.fc1->weight.to_vector<float>();
  model.to(Device::cpu());
  const auto after = model.parameters();
  for (size_t i = 0; i < before.size(); ++i) CHECK(after[i].same(before[i]));
  CHECK(model.fc1->weight.to_vector<float>() == values);
  // No build has 64 CUDA devices: the move fails up front and nothing has moved.
  CHECK_THROWS_AS(model.to(Device::cuda(63)), Error);
  for (const auto& p : model.parameters()) CHECK(p.device() == Device::cpu());
}

TEST_CASE("named_state lists parameters then buffers, shared tensors under each name, as handles", "[nn]") {
  struct Inner : nn::Module {
    Inner() {
      register_parameter("w", zeros(Shape{2}));
      register_buffer("count", zeros(Shape{1}));
    }
  };
  struct Outer : nn::Module {
    std::shared_ptr<Inner> a;
    Outer() {
      register_buffer("steps", zeros(Shape{1}));
      a = register_module("a", std::make_shared<Inner>());
      register_module("b", a);  // the same module under a second name
      register_parameter("scale", ones(Shape{1}));
    }
  } outer;
  const auto state = outer.named_state();
  // Every parameter (own first, then each child's), then every buffer in the same walk.
  CHECK(names_of(state) ==
        std::vector<std::string>{"scale", "a.w", "b.w", "steps", "a.count", "b.count"});
  CHECK(state[1].second.same(outer.a->named_parameters()[0].second));  // the module's own tensor
  CHECK(state[2].second.same(state[1].second));
  // state_dict is named_state under the same names, as detached views of the same storage.
  const auto sd = outer.state_dict();
  REQUIRE(sd.size() == state.size());
  for (const auto& [n, t] : state) {
    REQUIRE(sd.count(n) == 1);
    CHECK(sd.at(n).storage().data() == t.storage().data());
    CHECK_FALSE(sd.at(n).requires_grad());
  }
}
