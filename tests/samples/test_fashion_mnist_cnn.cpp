// samples/fashion_mnist --model cnn: resuming a CNN run (batch-norm buffers, dropout masks
// drawn from the default generator) mid-epoch continues it bit for bit on the CPU; the
// checkpoint carries the buffers; an MLP checkpoint is refused by a CNN run. Runs on the
// first 256 training and 128 test examples of the real Fashion-MNIST files.
#include <catch2/catch.hpp>

#include <sstream>

#include "samples/fashion_mnist/checkpoint.h"
#include "samples/fashion_mnist/trainer.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;
using namespace minidl::fashion_mnist;

namespace {

TrainerConfig cnn_config() {
  TrainerConfig c;
  c.model = "cnn";
  c.epochs = 2;
  c.limit = 256;  // 4 batches of 64 per epoch
  c.test_limit = 128;
  c.device = "cpu";
  c.progress = ProgressStyle::Quiet;
  c.seed = 5;
  return c;
}

const Datasets& cnn_data() {
  INFO("Fashion-MNIST is a required dependency: run scripts/setup-deps (Debian package dataset-fashion-mnist)");
  static const Datasets d = load_datasets(cnn_config());
  return d;
}

TrainingResult run(const TrainerConfig& c) {
  std::ostringstream log;
  return train(c, cnn_data(), log);
}

void check_same_bits(const nn::StateDict& a, const nn::StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    if (t.dtype() == DType::Int64) CHECK(t.to_vector<int64_t>() == b.at(name).to_vector<int64_t>());
    else CHECK(t.to_vector<float>() == b.at(name).to_vector<float>());
  }
}

}  // namespace

TEST_CASE("fashion_mnist cnn: a run stopped mid-epoch resumes bit for bit with its batch-norm buffers",
          "[samples][fashion-mnist][cnn]") {
  minidl::testing::TempDir dir;
  const TrainingResult a = run(cnn_config());
  REQUIRE(a.finished);
  const nn::StateDict final_a = a.model->state_dict();
  REQUIRE(final_a.count("2.running_mean") == 1);  // Sequential index 2: the first BatchNorm2d
  CHECK(final_a.at("2.num_batches_tracked").item<int64_t>() == 8);

  TrainerConfig first = cnn_config();
  first.checkpoint = dir.file("cnn.safetensors");
  first.stop_after_batches = 6;  // epoch 2, batch 2 of 4
  const TrainingResult b1 = run(first);
  CHECK_FALSE(b1.finished);
  const Checkpoint mid = load_checkpoint(first.checkpoint);
  REQUIRE(mid.model.count("6.running_var") == 1);  // the second BatchNorm2d's buffers are saved
  CHECK(mid.model.at("6.num_batches_tracked").item<int64_t>() == 6);

  TrainerConfig second = cnn_config();
  second.resume = first.checkpoint;
  const TrainingResult b2 = run(second);
  CHECK(b2.finished);
  REQUIRE(a.history.size() == b2.history.size());
  for (size_t i = 0; i < a.history.size(); ++i) {
    CHECK(a.history[i].train_loss == b2.history[i].train_loss);
    CHECK(a.history[i].test_loss == b2.history[i].test_loss);
    CHECK(a.history[i].test_acc == b2.history[i].test_acc);
  }
  check_same_bits(final_a, b2.model->state_dict());
}

TEST_CASE("fashion_mnist cnn: an MLP checkpoint is refused naming both models", "[samples][fashion-mnist][cnn]") {
  minidl::testing::TempDir dir;
  TrainerConfig mlp = cnn_config();
  mlp.model = "mlp";
  mlp.epochs = 1;
  mlp.checkpoint = dir.file("mlp.safetensors");
  run(mlp);
  TrainerConfig cnn = cnn_config();
  cnn.epochs = 1;
  cnn.resume = mlp.checkpoint;
  const std::string m = minidl::testing::error_message([&] { run(cnn); });
  CHECK_THAT(m, Catch::Contains("refusing to resume") && Catch::Contains("784-256-128-10") &&
                    Catch::Contains(cnn_architecture_name()));
  TrainerConfig bad = cnn_config();
  bad.model = "resnet";
  CHECK_THAT(minidl::testing::error_message([&] { run(bad); }), Catch::Contains("--model must be mlp or cnn"));
}
