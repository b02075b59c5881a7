// io::save_checkpoint / load_checkpoint: a training state (model, optimizer with its groups,
// schedule, generators, step, the program's metadata) round-trips bit for bit; non-finite
// tensors and numbers are refused on the way out (the old file kept) and on the way in; every
// counter read back is validated; a FIFO, a folder or a device is refused without blocking; the
// version 1 layouts of the trainers still load.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "io/checkpoint.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;
using minidl::testing::error_message;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A small model after two AdamW steps in two groups, with a schedule: every part has state.
struct Run {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::AdamW> optimizer;
  std::unique_ptr<optim::WarmupCosineLR> scheduler;
  optim::NamedParameters names;

  explicit Run(uint64_t seed) {
    manual_seed(seed);
    model->push_back(std::make_shared<nn::Linear>(5, 3));
    model->push_back(std::make_shared<nn::Linear>(3, 2));
    names = model->named_parameters();
    std::vector<Tensor> weights, biases;
    for (const auto& [name, p] : names) (p.dim() == 2 ? weights : biases).push_back(p);
    optimizer = std::make_unique<optim::AdamW>(
        std::vector<optim::ParamGroup>{{weights, {.weight_decay = 0.1}}, {biases, {.weight_decay = 0.0}}},
        optim::AdamWOptions{.lr = 0.01});
    scheduler = std::make_unique<optim::WarmupCosineLR>(*optimizer, 2, 10, 0.1);
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) {
      optimizer->zero_grad();
      (*model)(randn({4, 5})).sum().backward();
      optimizer->step();
      scheduler->step();
    }
  }
  io::TrainingState state() { return {*model, *optimizer, names, scheduler.get()}; }
};

io::Checkpoint checkpoint_of(Run& r, int64_t step) {
  io::Checkpoint ck;
  ck.program = "test";
  ck.step = step;
  io::capture_training_state(r.state(), ck);
  ck.generators["batch"] = GeneratorState{7, 123};
  ck.metadata["hp.lr"] = "0.01";
  ck.metadata["vocab"] = "65,66";
  return ck;
}

// Rewrites a checkpoint file with one metadata entry changed (or added).
void patch_metadata(const std::string& path, const std::string& key, const std::string& value) {
  io::SafetensorsFile f = io::load_safetensors(path);
  f.metadata[key] = value;
  io::save_safetensors(f.tensors, path, f.metadata);
}

}  // namespace

TEST_CASE("checkpoint: a training state round-trips bit for bit and training continues identically", "[io][checkpoint]") {
  minidl::testing::TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  Run a(3);
  a.steps(2);
  io::save_checkpoint(checkpoint_of(a, 2), path);
  const GeneratorState after_save = default_generator().state();

  Run b(99);  // other weights, fresh optimizer and schedule
  const io::Checkpoint ck = io::load_checkpoint(path, "test");
  CHECK(ck.step == 2);
  CHECK(ck.program == "test");
  CHECK(ck.generators.at("batch") == GeneratorState{7, 123});
  CHECK(ck.metadata.at("vocab") == "65,66");
  REQUIRE(ck.optimizer.param_groups.size() == 2);
  CHECK(ck.optimizer.param_groups[0].options.at("weight_decay") == 0.1);
  REQUIRE(ck.scheduler.has_value());
  CHECK(ck.scheduler->last_epoch == 2);
  io::restore_training_state(b.state(), ck, path);
  CHECK(default_generator().state() == after_save);

  // Both take the same next steps from the same default generator: the same bits.
  const GeneratorState g = default_generator().state();
  a.steps(3);
  default_generator().set_state(g);
  b.steps(3);
  for (const auto& [name, t] : a.model->state_dict()) {
    INFO(name);
    CHECK(t.to_vector<float>() == b.model->state_dict().at(name).to_vector<float>());
  }
  CHECK(a.optimizer->param_groups()[1].lr == b.optimizer->param_groups()[1].lr);
}

TEST_CASE("checkpoint: non-finite tensors and numbers are refused before anything is written", "[io][checkpoint]") {
  minidl::testing::TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  Run r(5);
  r.steps(1);
  io::save_checkpoint(checkpoint_of(r, 1), path);
  const std::string before = read_bytes(path);

  io::Checkpoint nan_weight = checkpoint_of(r, 1);
  std::vector<float> w = nan_weight.model.at("1.bias").to_vector<float>();
  w[1] = std::numeric_limits<float>::infinity();
  nan_weight.model["1.bias"] = from_vector<float>(w);
  CHECK_THAT(error_message([&] { io::save_checkpoint(nan_weight, path); }),
             Catch::Contains("refusing to save") && Catch::Contains("tensor 'model.1.bias' holds 1 NaN or infinite value"));

  io::Checkpoint nan_lr = checkpoint_of(r, 1);
  nan_lr.optimizer.group_lrs[0] = std::nan("");
  CHECK_THAT(error_message([&] { io::save_checkpoint(nan_lr, path); }),
             Catch::Contains("refusing to save") && Catch::Contains("optimizer.group_lrs"));

  io::Checkpoint negative = checkpoint_of(r, -1);
  CHECK_THAT(error_message([&] { io::save_checkpoint(negative, path); }), Catch::Contains("step is -1"));
  CHECK(read_bytes(path) == before);
}

TEST_CASE("checkpoint: every counter read back is validated", "[io][checkpoint]") {
  minidl::testing::TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  Run r(6);
  r.steps(1);
  struct Case {
    std::string key, value, expected;
  };
  for (const Case& c : {Case{"step", "-3", "metadata 'step': -3 is out of range"},
                        Case{"step", "12x", "'12x' is not an integer"},
                        Case{"scheduler.last_epoch", "-1", "metadata 'scheduler.last_epoch': -1 is out of range"},
                        Case{"optimizer.counter.0.weight.step", "-5", "-5 is out of range"},
                        Case{"optimizer.groups", "3", "3 groups but 2 group lrs"},
                        Case{"optimizer.group_lrs", "0.01,nan", "'nan' is not a finite number"},
                        Case{"optimizer.group_lrs", "0.01,-1", "a negative lr"},
                        Case{"generator.batch.offset", "-1", "is not an unsigned integer"},
                        Case{"minidl.checkpoint", "7", "layout version '7'"}}) {
    INFO(c.key << " = " << c.value);
    io::save_checkpoint(checkpoint_of(r, 1), path);
    patch_metadata(path, c.key, c.value);
    CHECK_THAT(error_message([&] { io::load_checkpoint(path); }),
               Catch::Contains("checkpoint " + path) && Catch::Contains(c.expected));
  }
  io::save_checkpoint(checkpoint_of(r, 1), path);
  CHECK_THAT(error_message([&] { io::load_checkpoint(path, "char_gpt"); }),
             Catch::Contains("written by test, not by char_gpt"));
}

TEST_CASE("checkpoint: a FIFO, a folder or a device is refused at once, never read", "[io][checkpoint]") {
  minidl::testing::TempDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Nobody writes to the FIFO: opening it for reading in blocking mode would wait forever.
  CHECK_THAT(error_message([&] { io::load_checkpoint(fifo); }), Catch::Contains("not a regular file (a FIFO)"));
  CHECK_THAT(error_message([&] { io::load_checkpoint(dir.path()); }), Catch::Contains("not a regular file (a folder)"));
  CHECK_THAT(error_message([&] { io::load_checkpoint("/dev/zero"); }), Catch::Contains("not a regular file (a device)"));
  CHECK_THAT(error_message([&] { io::load_checkpoint(dir.file("missing")); }), Catch::Contains("cannot open"));
}

TEST_CASE("checkpoint: the trainers' version 1 layouts load, mapped onto this one", "[io][checkpoint]") {
  minidl::testing::TempDir dir;
  Run r(8);
  r.steps(1);
  io::Checkpoint now = checkpoint_of(r, 1);
  io::TensorMap tensors;
  for (const auto& [k, t] : now.model) tensors.emplace("model." + k, t);
  for (const auto& [k, t] : now.optimizer.tensors) tensors.emplace("optimizer." + k, t);
  io::Metadata v1;
  v1["optimizer.name"] = "AdamW";
  v1["optimizer.group_lrs"] = io::format_exact(now.optimizer.group_lrs[0]) + "," + io::format_exact(now.optimizer.group_lrs[1]);
  for (const auto& [k, v] : now.optimizer.hyperparameters) v1["optimizer.hp." + k] = io::format_exact(v);
  for (const auto& [k, v] : now.optimizer.counters) v1["optimizer.counter." + k] = std::to_string(v);
  v1["scheduler.name"] = "none";
  v1["hp.seed"] = "4";
  v1["history"] = "";

  SECTION("char_gpt/1") {
    io::Metadata m = v1;
    m["minidl.checkpoint"] = "char_gpt/1";
    m["iteration"] = "7";
    m["generator.default.seed"] = "4";
    m["generator.default.offset"] = "100";
    m["generator.batch.offset"] = "56";
    m["vocab"] = "65,66";
    const std::string path = dir.file("gpt.safetensors");
    io::save_safetensors(tensors, path, m);
    const io::Checkpoint ck = io::load_checkpoint(path, "char_gpt");
    CHECK(ck.step == 7);
    CHECK(ck.generators.at("default") == GeneratorState{4, 100});
    CHECK(ck.generators.at("batch") == GeneratorState{4, 56});
    CHECK(ck.metadata.at("vocab") == "65,66");
    CHECK(ck.metadata.at("hp.seed") == "4");
    CHECK_FALSE(ck.scheduler.has_value());
    CHECK(ck.model.at("0.weight").to_vector<float>() == now.model.at("0.weight").to_vector<float>());
  }
  SECTION("fashion_mnist/1") {
    io::Metadata m = v1;
    m["minidl.checkpoint"] = "fashion_mnist/1";
    m["generator.seed"] = "0";
    m["generator.offset"] = "9";
    m["loader.epoch"] = "2";
    m["loader.batch"] = "3";
    m["loader.batch_size"] = "64";
    m["loader.dataset_size"] = "512";
    m["loader.drop_last"] = "0";
    const std::string path = dir.file("fm.safetensors");
    io::save_safetensors(tensors, path, m);
    const io::Checkpoint ck = io::load_checkpoint(path, "fashion_mnist");
    CHECK(ck.step == 2 * 8 + 3);  // 8 batches of 64 per epoch
    CHECK(ck.generators.at("default") == GeneratorState{0, 9});
    CHECK(ck.metadata.at("loader.batch") == "3");
  }
}
