// The convolutional layers of nn/ (conv, pool, batch_norm, dropout): PyTorch's default
// initialisation bounds, BatchNorm2d's buffers in state_dict, clone, to() and a safetensors
// round trip, train()/eval() reaching every layer of a tree, and DataParallel's broadcast
// of the buffers.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/ops.h"
#include "io/safetensors.h"
#include "nn/nn.h"
#include "parallel/data_parallel.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;

namespace {

std::shared_ptr<nn::Sequential> small_cnn() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(2, 4, Size2{3, 3}, nn::Conv2dOptions{.padding = {1, 1}}));
  m->push_back(std::make_shared<nn::BatchNorm2d>(4));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::MaxPool2d>(Size2{2, 2}));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Dropout>(0.5));
  m->push_back(std::make_shared<nn::Linear>(4 * 3 * 3, 3));
  return m;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_vector<float>()) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

}  // namespace

TEST_CASE("Conv2d initialises weight and bias within PyTorch's bounds 1/sqrt(fan_in)", "[nn][conv]") {
  manual_seed(0);
  nn::Conv2d conv(6, 8, {3, 5}, nn::Conv2dOptions{.groups = 2});
  REQUIRE(conv.weight.shape() == Shape{8, 3, 3, 5});
  const double bound = 1.0 / std::sqrt(3.0 * 3 * 5);  // fan_in = C_in/groups · KH · KW
  CHECK(max_abs(conv.weight) <= bound);
  CHECK(max_abs(conv.weight) > 0.9 * bound);  // 360 uniform draws reach the top 10% of the range (p fail ~ 1e-16)
  CHECK(max_abs(conv.bias) <= bound);
  CHECK(conv.parameters().size() == 2);
  nn::Conv2d no_bias(1, 2, {3, 3}, nn::Conv2dOptions{.bias = false});
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
}

TEST_CASE("BatchNorm2d registers weight and bias as parameters and its running statistics as buffers",
          "[nn][batch_norm]") {
  nn::BatchNorm2d bn(3);
  const auto params = bn.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  const auto buffers = bn.named_buffers();
  REQUIRE(buffers.size() == 3);
  CHECK(buffers[0].first == "running_mean");
  CHECK(buffers[1].first == "running_var");
  CHECK(buffers[2].first == "num_batches_tracked");
  CHECK(bn.num_batches_tracked.dtype() == DType::Int64);
  CHECK(bn.running_var.to_vector<float>() == std::vector<float>{1, 1, 1});
  const nn::StateDict sd = bn.state_dict();
  CHECK(sd.size() == 5);
  CHECK(sd.count("running_mean") == 1);
}

TEST_CASE("BatchNorm2d updates running stats and the batch counter in training, and uses them in eval",
          "[nn][batch_norm]") {
  nn::BatchNorm2d bn(2, nn::BatchNormOptions{.momentum = 0.5});
  Generator g(3);
  const Tensor x = randn({4, 2, 3, 3}, {}, &g) * 2.0 + 1.0;
  bn(x);
  bn(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  // Two updates with momentum 0.5 from 0: running_mean = 0.75 · batch mean.
  const auto mean = x.transpose(0, 1).contiguous().reshape({2, 36}).mean(1).to_vector<float>();
  const auto rm = bn.running_mean.to_vector<float>();
  for (size_t c = 0; c < 2; ++c) CHECK(rm[c] == Approx(0.75 * mean[c]).margin(1e-6));  // float32 sums of 36 terms
  bn.eval();
  const auto before = bn.running_mean.to_vector<float>();
  const Tensor y = bn(x);
  CHECK(bn.running_mean.to_vector<float>() == before);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  const Tensor want = ops::batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, false);
  CHECK(y.to_vector<float>() == want.to_vector<float>());
}

TEST_CASE("train() and eval() switch every layer of a CNN, and eval makes dropout the identity", "[nn][dropout]") {
  manual_seed(1);
  auto model = small_cnn();
  model->eval();
  for (const auto& [name, child] : model->named_children()) CHECK_FALSE(child->is_training());
  Generator g(2);
  const Tensor x = randn({2, 2, 6, 6}, {}, &g);
  const auto a = (*model)(x).to_vector<float>();
  CHECK((*model)(x).to_vector<float>() == a);  // deterministic: no dropout, running statistics
  model->train();
  for (const auto& [name, child] : model->named_children()) CHECK(child->is_training());
  nn::Dropout drop(0.5);
  drop.eval();
  const Tensor ones4 = ones({4});
  CHECK(drop(ones4).same(ones4));
}

TEST_CASE("a CNN's state_dict, clone, to() and a safetensors round trip carry the batch-norm buffers",
          "[nn][batch_norm]") {
  manual_seed(2);
  auto model = small_cnn();
  Generator g(4);
  (*model)(randn({3, 2, 6, 6}, {}, &g));  // one training step moves the running statistics
  const nn::StateDict sd = model->state_dict();
  REQUIRE(sd.count("1.running_mean") == 1);
  REQUIRE(sd.count("1.num_batches_tracked") == 1);
  CHECK(sd.at("1.num_batches_tracked").item<int64_t>() == 1);

  minidl::testing::TempDir dir;
  const std::string path = dir.file("cnn.safetensors");
  io::save_safetensors(sd, path);
  manual_seed(99);
  auto fresh = small_cnn();
  fresh->load_state_dict(io::load_safetensors(path).tensors);
  const nn::StateDict back = fresh->state_dict();
  for (const auto& [name, t] : sd) {
    INFO(name);
    if (t.dtype() == DType::Int64) CHECK(back.at(name).to_vector<int64_t>() == t.to_vector<int64_t>());
    else CHECK(back.at(name).to_vector<float>() == t.to_vector<float>());
  }

  auto copy = model->clone();
  const auto rm = std::static_pointer_cast<nn::BatchNorm2d>((*std::static_pointer_cast<nn::Sequential>(copy))[1]);
  CHECK(rm->running_mean.to_vector<float>() == sd.at("1.running_mean").to_vector<float>());
  CHECK(rm->num_batches_tracked.item<int64_t>() == 1);
  CHECK_FALSE(rm->running_mean.same(sd.at("1.running_mean")));
}

TEST_CASE("DataParallel broadcasts batch-norm buffers from replica 0 to the other replicas", "[nn][batch_norm]") {
  manual_seed(3);
  auto model = small_cnn();
  parallel::DataParallel dp(model, std::vector<Device>{Device::cpu(), Device::cpu()});
  auto& bn0 = static_cast<nn::BatchNorm2d&>(*static_cast<nn::Sequential&>(dp.replica(0))[1]);
  auto& bn1 = static_cast<nn::BatchNorm2d&>(*static_cast<nn::Sequential&>(dp.replica(1))[1]);
  bn0.running_mean.fill_(0.25);
  bn0.num_batches_tracked.fill_(7);
  dp.broadcast_parameters();
  CHECK(bn1.running_mean.to_vector<float>() == std::vector<float>(4, 0.25f));
  CHECK(bn1.num_batches_tracked.item<int64_t>() == 7);
}

TEST_CASE("the CNN layers reject inputs of the wrong shape naming the layer", "[nn][conv][errors]") {
  nn::Conv2d conv(3, 4, {3, 3});
  std::string m = minidl::testing::error_message([&] { conv(zeros({2, 5, 8, 8})); });
  CHECK_THAT(m, Catch::Contains("Conv2d(3, 4") && Catch::Contains("[N, 3, H, W]") && Catch::Contains("[2, 5, 8, 8]"));
  nn::BatchNorm2d bn(4);
  m = minidl::testing::error_message([&] { bn(zeros({2, 3, 8, 8})); });
  CHECK_THAT(m, Catch::Contains("BatchNorm2d(4") && Catch::Contains("[2, 3, 8, 8]"));
  m = minidl::testing::error_message([] { nn::Conv2d(3, 4, {3, 3}, nn::Conv2dOptions{.groups = 2}); });
  CHECK_THAT(m, Catch::Contains("divisible by groups 2"));
  m = minidl::testing::error_message([] { nn::Dropout(-0.1); });
  CHECK_THAT(m, Catch::Contains("Dropout") && Catch::Contains("[0, 1]"));
}
