// samples/fashion_mnist driven as a careless user would: a batch size of INT64_MAX, a learning
// rate that makes the run diverge, checkpoints holding NaN or Inf, and output paths in folders
// that do not exist. Each is a clear error before harm is done (or, for the batch size, one
// batch of everything), and whatever the trainer writes it can read back. Runs on the first 512
// training and 256 test examples of the real Fashion-MNIST files, like the resume tests.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>

#include "io/safetensors.h"
#include "samples/fashion_mnist/checkpoint.h"
#include "samples/fashion_mnist/trainer.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;
using namespace minidl::fashion_mnist;
using minidl::testing::error_message;
using minidl::testing::read_bytes;
using minidl::testing::TempDir;

namespace {

TrainerConfig small_config() {
  TrainerConfig c;
  c.epochs = 1;
  c.limit = 512;  // 8 batches of 64
  c.test_limit = 256;
  c.device = "cpu";
  c.progress = ProgressStyle::Lines;
  c.seed = 3;
  return c;
}

const Datasets& small_data() {
  INFO("Fashion-MNIST is a required dependency: run scripts/setup-deps (Debian package dataset-fashion-mnist)");
  static const Datasets d = load_datasets(small_config());
  return d;
}

TrainingResult run(const TrainerConfig& c, std::ostream& log) { return train(c, small_data(), log); }

TrainingResult run(const TrainerConfig& c) {
  std::ostringstream log;
  return run(c, log);
}

// A copy of the checkpoint at `from` written to `to` with one value of `tensor` replaced.
void write_with_value(const std::string& from, const std::string& to, const std::string& tensor, float value) {
  io::SafetensorsFile f = io::load_safetensors(from);
  std::vector<float> v = f.tensors.at(tensor).to_vector<float>();
  v[v.size() / 2] = value;
  f.tensors[tensor] = from_vector<float>(v).reshape(f.tensors.at(tensor).shape());
  io::save_safetensors(f.tensors, to, f.metadata);
}

}  // namespace

TEST_CASE("fashion_mnist: a batch size of INT64_MAX trains one batch of everything per epoch", "[samples][fashion-mnist]") {
  TempDir dir;
  TrainerConfig c = small_config();
  c.batch_size = std::numeric_limits<int64_t>::max();
  c.checkpoint = dir.file("ck.safetensors");
  const TrainingResult r = run(c);
  REQUIRE(r.history.size() == 1);
  CHECK(std::isfinite(r.history[0].train_loss));  // was NaN: 0 / 0 samples after 0 batches
  CHECK(load_checkpoint(c.checkpoint).loader.batch_size == c.batch_size);
}

TEST_CASE("fashion_mnist: a diverged run stops at the first non-finite loss and keeps a readable checkpoint", "[samples][fashion-mnist]") {
  TempDir dir;
  for (const std::string optimizer : {"sgd", "adamw"}) {
    INFO(optimizer);
    TrainerConfig c = small_config();
    c.optimizer = optimizer;
    c.lr = 1e30;
    c.checkpoint = dir.file(optimizer + ".safetensors");
    c.checkpoint_every = 1;
    const std::string message = error_message([&] { run(c); });
    CHECK_THAT(message, Catch::Contains("training loss is") && Catch::Contains("at epoch 1, batch ") &&
                            Catch::Contains("the run diverged and stops here"));
    // What it saved before stopping is a checkpoint it reads back: finite weights, finite history.
    if (message.find("keeps the state saved at") != std::string::npos) {
      const Checkpoint ck = load_checkpoint(c.checkpoint);
      CHECK(ck.loader.epoch == 0);
      CHECK_THAT(message, Catch::Contains("batch " + std::to_string(ck.loader.batch) + ", before the divergence"));
    }
  }
}

TEST_CASE("fashion_mnist: a diverging run leaves the last good checkpoint untouched", "[samples][fashion-mnist]") {
  TempDir dir;
  TrainerConfig good = small_config();
  good.checkpoint = dir.file("ck.safetensors");
  run(good);
  const std::string before = read_bytes(good.checkpoint);

  TrainerConfig bad = good;  // a new run into the same file, diverging in its first epoch
  bad.lr = 1e30;
  CHECK_THAT(error_message([&] { run(bad); }),
             Catch::Contains("diverged") && Catch::Contains(good.checkpoint + " was not written by this run"));
  CHECK(read_bytes(good.checkpoint) == before);
}

TEST_CASE("fashion_mnist: save_checkpoint refuses NaN weights or a non-finite history, keeping the old file", "[samples][fashion-mnist]") {
  TempDir dir;
  TrainerConfig c = small_config();
  c.checkpoint = dir.file("ck.safetensors");
  run(c);
  const std::string before = read_bytes(c.checkpoint);
  Checkpoint ck = load_checkpoint(c.checkpoint);

  Checkpoint nan_weights = ck;
  std::vector<float> w = nan_weights.model.at("2.bias").to_vector<float>();
  w[0] = std::nanf("");
  nan_weights.model["2.bias"] = from_vector<float>(w);
  CHECK_THAT(error_message([&] { save_checkpoint(nan_weights, c.checkpoint); }),
             Catch::Contains("refusing to save") && Catch::Contains("'model.2.bias' holds 1 NaN or infinite value"));

  Checkpoint nan_history = ck;
  nan_history.history[0].train_loss = std::nan("");
  CHECK_THAT(error_message([&] { save_checkpoint(nan_history, c.checkpoint); }),
             Catch::Contains("refusing to save") && Catch::Contains("must be finite"));
  CHECK(read_bytes(c.checkpoint) == before);
}

TEST_CASE("fashion_mnist: resuming from a checkpoint with NaN or Inf weights is an error naming the tensor", "[samples][fashion-mnist]") {
  TempDir dir;
  TrainerConfig c = small_config();
  c.epochs = 2;
  c.stop_after_batches = 8;
  c.checkpoint = dir.file("good.safetensors");
  run(c);
  struct Case {
    std::string tensor;
    float value;
  };
  for (const Case& k : {Case{"model.0.weight", std::nanf("")},
                        Case{"optimizer.4.bias.momentum_buffer", std::numeric_limits<float>::infinity()}}) {
    INFO(k.tensor);
    const std::string bad = dir.file("bad.safetensors");
    write_with_value(c.checkpoint, bad, k.tensor, k.value);
    CHECK_NOTHROW(io::load_safetensors(bad));  // the format allows any value; the trainer does not
    TrainerConfig resume = c;
    resume.stop_after_batches = 0;
    resume.checkpoint.clear();
    resume.resume = bad;
    std::ostringstream log;
    CHECK_THAT(error_message([&] { run(resume, log); }),
               Catch::Contains("checkpoint " + bad) && Catch::Contains("tensor '" + k.tensor + "' holds 1 NaN or infinite"));
    CHECK(log.str().empty());  // refused before any training
  }
}

TEST_CASE("fashion_mnist: an output path in a missing folder is an error before any training", "[samples][fashion-mnist]") {
  TempDir dir;
  const std::string missing = dir.file("no-such-folder");
  for (const std::string flag : {"--checkpoint", "--metrics", "--plot"}) {
    INFO(flag);
    TrainerConfig c = small_config();
    std::string& path = flag == "--checkpoint" ? c.checkpoint : flag == "--metrics" ? c.metrics : c.plot;
    path = missing + "/out";
    std::ostringstream log;
    CHECK_THAT(error_message([&] { run(c, log); }),
               Catch::Contains(flag + " " + path) && Catch::Contains("the folder " + missing + " does not exist"));
    CHECK(log.str().empty());  // no epoch was trained
    path = dir.path();
    CHECK_THAT(error_message([&] { run(c, log); }), Catch::Contains(flag) && Catch::Contains("names a folder"));
    CHECK(log.str().empty());
  }
}
