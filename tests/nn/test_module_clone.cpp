// Tests for Module::clone (nn/module.*, and the clones of Linear, ReLU, Flatten, Sequential):
// a clone is a deep copy — same names, values, devices and training flags, separate storage,
// no gradients — and cloning never draws from the default generator. parallel::DataParallel
// builds its replicas this way.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/nn.h"

using namespace minidl;

namespace {

struct ClonableModel : nn::Cloneable<ClonableModel> {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(3, 2));
  Tensor forward(const Tensor& x) override { return (*fc2)(ops::relu((*fc1)(x))); }
  std::string name() const override { return "ClonableModel"; }
};

struct PlainModel : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(2, 2));
  std::string name() const override { return "PlainModel"; }
};

struct ScaledLinear : nn::Linear {  // a subclass that forgot to override clone()
  ScaledLinear() : nn::Linear(2, 2) {}
  Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0; }
};

void check_deep_copy(const nn::Module& original, const nn::Module& copy) {
  auto a = original.named_parameters(), b = copy.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second.to_vector<float>() == b[i].second.to_vector<float>());
    CHECK(a[i].second.storage().data() != b[i].second.storage().data());
    CHECK(b[i].second.requires_grad());
    CHECK(b[i].second.is_leaf());
    CHECK_FALSE(b[i].second.grad().defined());
  }
}

}  // namespace

TEST_CASE("a Cloneable model clones into separate parameters with equal values", "[nn][module][clone]") {
  manual_seed(3);
  ClonableModel model;
  model.eval();
  const GeneratorState before = default_generator().state();
  std::shared_ptr<nn::Module> copy = model.clone();
  CHECK(default_generator().state() == before);  // cloning drew no random numbers
  REQUIRE(dynamic_cast<ClonableModel*>(copy.get()) != nullptr);
  check_deep_copy(model, *copy);
  CHECK_FALSE(copy->is_training());
  CHECK_FALSE(dynamic_cast<ClonableModel&>(*copy).fc1->is_training());

  // Same function, independent state: training the copy leaves the original unchanged.
  Tensor x = randn({5, 4});
  CHECK((*copy)(x).to_vector<float>() == model(x).to_vector<float>());
  ops::sum((*copy)(x)).backward();
  CHECK_FALSE(model.fc1->weight.grad().defined());
}

TEST_CASE("a Sequential clones layer by layer and keeps the fused forward's results", "[nn][module][clone]") {
  manual_seed(4);
  nn::Sequential net({std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(6, 4), std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::Linear>(4, 3, false)});
  const GeneratorState before = default_generator().state();
  std::shared_ptr<nn::Module> copy = net.clone();
  CHECK(default_generator().state() == before);
  auto& seq = dynamic_cast<nn::Sequential&>(*copy);
  REQUIRE(seq.size() == 4);
  CHECK(seq[0]->name() == "Flatten");
  CHECK(seq[3]->name() == net[3]->name());  // bias=false survives
  check_deep_copy(net, *copy);
  Tensor x = randn({2, 2, 3});
  CHECK(seq(x).to_vector<float>() == net(x).to_vector<float>());
}

TEST_CASE("cloning a model without clone is a clear error naming it, and so is an inherited layer clone",
          "[nn][module][clone]") {
  PlainModel plain;
  CHECK_THROWS_WITH(plain.clone(), Catch::Contains("PlainModel") && Catch::Contains("nn::Cloneable"));
  ScaledLinear scaled;
  CHECK_THROWS_WITH(scaled.clone(), Catch::Contains("inherited from nn::Linear") && Catch::Contains("override"));
  nn::Sequential holder({std::make_shared<nn::Linear>(2, 2), std::make_shared<PlainModel>()});
  CHECK_THROWS_WITH(holder.clone(), Catch::Contains("PlainModel"));
}
