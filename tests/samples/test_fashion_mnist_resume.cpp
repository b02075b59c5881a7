// samples/fashion_mnist: resuming from a checkpoint continues the run bit for bit on the CPU
// (at an epoch boundary and mid-epoch, with SGD momentum and AdamW, with and without loader
// workers), the checkpoint is a safetensors file with the documented names, and a checkpoint
// of another model or other hyperparameters is refused with a clear error. Runs on the first
// 512 training and 256 test examples of the real Fashion-MNIST files, so each run takes
// a fraction of a second.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "io/safetensors.h"
#include "samples/fashion_mnist/checkpoint.h"
#include "samples/fashion_mnist/metrics.h"
#include "samples/fashion_mnist/trainer.h"
#include "tests/temp_dir.h"

using namespace minidl;
using namespace minidl::fashion_mnist;

namespace {

TrainerConfig small_config() {
  TrainerConfig c;
  c.epochs = 2;
  c.limit = 512;  // 8 batches of 64 per epoch
  c.test_limit = 256;
  c.device = "cpu";
  c.progress = ProgressStyle::Quiet;
  c.seed = 3;
  return c;
}

const Datasets& small_data() {
  INFO("Fashion-MNIST is a required dependency: run scripts/setup-deps (Debian package dataset-fashion-mnist)");
  static const Datasets d = load_datasets(small_config());
  return d;
}

TrainingResult run(const TrainerConfig& c) {
  std::ostringstream log;
  return train(c, small_data(), log);
}

// Same losses, accuracies and lrs in every epoch: exact equality of doubles.
void check_same_history(const std::vector<EpochMetrics>& a, const std::vector<EpochMetrics>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("epoch " << a[i].epoch);
    CHECK(a[i].epoch == b[i].epoch);
    CHECK(a[i].train_loss == b[i].train_loss);
    CHECK(a[i].test_loss == b[i].test_loss);
    CHECK(a[i].test_acc == b[i].test_acc);
    CHECK(a[i].lr == b[i].lr);
  }
}

void check_same_bits(const nn::StateDict& a, const nn::StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name) == 1);
    CHECK(t.to_vector<float>() == b.at(name).to_vector<float>());
  }
}

}  // namespace

TEST_CASE("fashion_mnist: 2 epochs in one run equal 1 epoch plus a resumed epoch, bit for bit", "[samples][fashion-mnist]") {
  minidl::testing::TempDir dir;
  TrainerConfig straight = small_config();
  straight.checkpoint = dir.path() + "/straight.safetensors";
  const TrainingResult a = run(straight);
  REQUIRE(a.finished);

  TrainerConfig first = small_config();
  first.checkpoint = dir.path() + "/split.safetensors";
  first.stop_after_batches = 8;  // exactly epoch 1
  const TrainingResult b1 = run(first);
  CHECK_FALSE(b1.finished);
  REQUIRE(b1.history.size() == 1);

  TrainerConfig second = small_config();
  second.resume = first.checkpoint;
  second.checkpoint = first.checkpoint;
  second.metrics = dir.path() + "/metrics.csv";
  const TrainingResult b2 = run(second);
  CHECK(b2.finished);
  check_same_history(a.history, b2.history);
  check_same_bits(a.model->state_dict(), b2.model->state_dict());

  // The two final checkpoints hold the same optimizer state too.
  const Checkpoint ca = load_checkpoint(straight.checkpoint), cb = load_checkpoint(first.checkpoint);
  REQUIRE(ca.optimizer.tensors.size() == 6);  // a momentum buffer per weight and bias of 3 layers
  for (const auto& [name, t] : ca.optimizer.tensors) {
    INFO(name);
    CHECK(t.to_vector<float>() == cb.optimizer.tensors.at(name).to_vector<float>());
  }
  CHECK(cb.loader.epoch == 2);
  CHECK(cb.loader.batch == 0);

  // The metrics CSV of the resumed run lists both epochs.
  std::ifstream csv(second.metrics);
  std::string header, row1, row2;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  CHECK(header == "epoch,train_loss,test_loss,test_acc,samples_per_s,lr");
  CHECK(row1.rfind("1,", 0) == 0);
  CHECK(row2.rfind("2,", 0) == 0);
}

TEST_CASE("fashion_mnist: a run stopped mid-epoch resumes bit for bit, also with loader workers", "[samples][fashion-mnist]") {
  minidl::testing::TempDir dir;
  const TrainingResult a = run(small_config());

  const int workers = GENERATE(0, 2);
  INFO("workers in the resumed run: " << workers);
  TrainerConfig first = small_config();
  first.checkpoint = dir.path() + "/mid.safetensors";
  first.checkpoint_every = 3;
  first.stop_after_batches = 13;  // epoch 2, batch 5 of 8
  const TrainingResult b1 = run(first);
  CHECK_FALSE(b1.finished);
  CHECK(b1.history.size() == 1);
  const Checkpoint mid = load_checkpoint(first.checkpoint);
  CHECK(mid.loader.epoch == 1);
  CHECK(mid.loader.batch == 5);
  CHECK(mid.epoch_samples == 5 * 64);

  TrainerConfig second = small_config();
  second.resume = first.checkpoint;
  second.workers = workers;
  const TrainingResult b2 = run(second);
  CHECK(b2.finished);
  check_same_history(a.history, b2.history);
  check_same_bits(a.model->state_dict(), b2.model->state_dict());
}

TEST_CASE("fashion_mnist: AdamW with a step schedule resumes bit for bit", "[samples][fashion-mnist]") {
  minidl::testing::TempDir dir;
  TrainerConfig c = small_config();
  c.optimizer = "adamw";
  c.lr = 1e-3;
  c.schedule = "step";
  c.epochs = 3;
  c.hidden = {64};
  const TrainingResult a = run(c);

  TrainerConfig first = c;
  first.checkpoint = dir.path() + "/adamw.safetensors";
  first.stop_after_batches = 11;
  run(first);
  const Checkpoint mid = load_checkpoint(first.checkpoint);
  CHECK(mid.optimizer.optimizer == "AdamW");
  CHECK(mid.optimizer.counters.at("0.weight.step") == 11);
  REQUIRE(mid.scheduler.has_value());
  CHECK(mid.scheduler->scheduler == "StepLR");
  CHECK(mid.scheduler->last_epoch == 1);

  TrainerConfig second = c;
  second.resume = first.checkpoint;
  const TrainingResult b = run(second);
  check_same_history(a.history, b.history);
  check_same_bits(a.model->state_dict(), b.model->state_dict());
}

TEST_CASE("fashion_mnist: the checkpoint is a safetensors file with model, optimizer and run metadata", "[samples][fashion-mnist]") {
  minidl::testing::TempDir dir;
  TrainerConfig c = small_config();
  c.epochs = 1;
  c.checkpoint = dir.path() + "/ck.safetensors";
  const TrainingResult r = run(c);
  const io::SafetensorsFile f = io::load_safetensors(c.checkpoint);
  CHECK(f.tensors.at("model.0.weight").shape() == Shape{256, 784});
  CHECK(f.tensors.at("model.4.bias").shape() == Shape{10});
  CHECK(f.tensors.at("optimizer.2.weight.momentum_buffer").shape() == Shape{128, 256});
  CHECK(f.tensors.at("model.0.weight").to_vector<float>() == r.model->state_dict().at("0.weight").to_vector<float>());
  CHECK(f.metadata.at("minidl.checkpoint") == "2");  // io/checkpoint.h's layout
  CHECK(f.metadata.at("minidl.program") == "fashion_mnist");
  CHECK(f.metadata.at("step") == "8");  // one epoch of 512 / 64 batches
  CHECK(f.metadata.at("run.hp.architecture") == "784-256-128-10");
  CHECK(f.metadata.at("run.hp.optimizer") == "sgd");
  CHECK(f.metadata.at("run.loader.epoch") == "1");
  CHECK(f.metadata.at("scheduler.name") == "CosineAnnealingLR");
  CHECK(f.metadata.count("generator.default.offset") == 1);
}

TEST_CASE("fashion_mnist: resuming with another architecture or other hyperparameters is refused", "[samples][fashion-mnist]") {
  minidl::testing::TempDir dir;
  TrainerConfig c = small_config();
  c.epochs = 1;
  c.checkpoint = dir.path() + "/ck.safetensors";
  run(c);

  TrainerConfig wider = c;
  wider.resume = c.checkpoint;
  wider.hidden = {512};
  CHECK_THROWS_WITH(run(wider), Catch::Contains("refusing to resume") && Catch::Contains("784-256-128-10") &&
                                    Catch::Contains("784-512-10"));
  TrainerConfig faster = c;
  faster.resume = c.checkpoint;
  faster.lr = 0.1;
  faster.batch_size = 32;
  CHECK_THROWS_WITH(run(faster), Catch::Contains("lr 0.05 in the checkpoint, 0.1 here") &&
                                     Catch::Contains("batch_size 64 in the checkpoint, 32 here"));
  TrainerConfig missing = c;
  missing.resume = dir.path() + "/nothing-here.safetensors";
  CHECK_THROWS_AS(run(missing), Error);
}

TEST_CASE("fashion_mnist: --devices cpu,cpu trains data-parallel and follows the one-device run", "[samples][fashion-mnist]") {
  TrainerConfig one = small_config();
  one.epochs = 1;
  TrainerConfig two = one;
  two.devices = {"cpu", "cpu"};
  const TrainingResult a = run(one), b = run(two);
  REQUIRE(a.history.size() == 1);
  REQUIRE(b.history.size() == 1);
  // Same math; the replicas' gradients are summed in another order than one device's GEMM
  // sums the batch, so float32 rounding differs: 1e-4 on losses of order 1.
  CHECK(std::abs(a.history[0].train_loss - b.history[0].train_loss) < 1e-4);
  CHECK(std::abs(a.history[0].test_loss - b.history[0].test_loss) < 1e-4);
  // The list reaches DataParallel (the equal losses alone would also hold if --devices were
  // ignored): its own check refuses a mixed list.
  TrainerConfig mixed = one;
  mixed.devices = {"cpu", "cuda:0"};
  CHECK_THROWS_WITH(run(mixed), Catch::Contains("DataParallel") && Catch::Contains("mixes CPU and CUDA"));
}

TEST_CASE("fashion_mnist: bad settings are clear errors", "[samples][fashion-mnist]") {
  TrainerConfig c = small_config();
  const int gpus = cuda_device_count();  // devices past the last one, on any machine
  const std::string beyond = Device::cuda(gpus).str();
  c.devices = {beyond, Device::cuda(gpus + 1).str()};
  CHECK_THROWS_WITH(run(c), Catch::Contains(beyond));
  c = small_config();
  c.optimizer = "lbfgs";
  CHECK_THROWS_WITH(run(c), Catch::Contains("--optimizer must be sgd or adamw"));
  c = small_config();
  c.checkpoint_every = 2;
  CHECK_THROWS_WITH(run(c), Catch::Contains("--checkpoint-every needs --checkpoint"));
  c = small_config();
  c.hidden = {0};
  CHECK_THROWS_WITH(run(c), Catch::Contains("--hidden sizes must be positive"));
}

TEST_CASE("fashion_mnist: without gnuplot the plot is skipped with a message saying so", "[samples][fashion-mnist]") {
  minidl::testing::TempDir dir;
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", dir.path().c_str(), 1);  // an empty folder: no gnuplot
  const std::string why = plot_metrics(dir.path() + "/p.png", {EpochMetrics{1, 0.5, 0.4, 0.8, 1000, 0.1}});
  setenv("PATH", saved.c_str(), 1);
  CHECK_THAT(why, Catch::Contains("gnuplot is not installed"));
}
