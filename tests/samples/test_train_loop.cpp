// samples::TrainLoop on a toy task (a Linear layer fitted by SGD, its "loss" scripted per step):
// the evaluation and checkpoint schedule of iteration and epoch runs, stop-and-resume, the
// divergence stop that names the last good checkpoint, and the --device checks every rank makes
// before any process group exists (samples/common/parallel_model.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "nn/linear.h"
#include "optim/sgd.h"
#include "samples/common/parallel_model.h"
#include "samples/common/train_loop.h"
#include "tests/error_message.h"
#include "tests/temp_dir.h"

using namespace minidl;
using minidl::testing::error_message;

namespace {

class ToyTask final : public samples::TrainingTask {
 public:
  ToyTask() {
    manual_seed(1);
    model_ = std::make_shared<nn::Linear>(3, 1);
    names_ = model_->named_parameters();
    optimizer_ = std::make_unique<optim::SGD>(model_->parameters(), optim::SGDOptions{.lr = 0.1});
  }
  io::TrainingState training_state() override { return {*model_, *optimizer_, names_, nullptr}; }
  std::map<std::string, std::string> hyperparameters() const override { return {{"width", "3"}}; }
  samples::StepResult train_step() override {
    optimizer_->zero_grad();
    (*model_)(ones({2, 3})).sum().backward();
    optimizer_->step();
    const double loss = steps_ < static_cast<int64_t>(losses.size()) ? losses[static_cast<size_t>(steps_)] : 1.0;
    ++steps_;
    return {loss, 2};
  }
  void end_epoch(int64_t epoch) override { epochs_ended.push_back(epoch); }
  samples::NamedValues evaluate(const samples::EvalAt& at) override { return {{"test loss", eval_loss(at.step)}}; }
  std::string record(const samples::EvalAt& at, const samples::NamedValues&) override {
    evaluated_at.push_back(at.step);
    return "eval at " + std::to_string(at.step);
  }
  std::string where(int64_t step) const override { return "step " + std::to_string(step); }
  void save_state(io::Checkpoint& ck) const override { ck.metadata["toy.steps"] = std::to_string(steps_); }
  void load_state(const io::Checkpoint& ck) override { steps_ = std::stoll(ck.metadata.at("toy.steps")); }
  double lr() const override { return 0.1; }

  std::vector<double> losses;                // scripted training losses, step by step
  std::function<double(int64_t)> eval_loss = [](int64_t) { return 0.5; };
  std::vector<int64_t> evaluated_at, epochs_ended;
  std::shared_ptr<nn::Linear> model_;

 private:
  optim::NamedParameters names_;
  std::unique_ptr<optim::SGD> optimizer_;
  int64_t steps_ = 0;
};

samples::LoopOptions options(int64_t steps) {
  return samples::LoopOptions{.program = "toy", .steps = steps, .steps_flag = "--steps", .progress = samples::ProgressStyle::Quiet};
}

samples::LoopResult run_loop(const samples::LoopOptions& o, ToyTask& task) {
  std::ostringstream out;
  samples::TrainLoop loop(o, task, out);
  loop.resume();
  return loop.run();
}

}  // namespace

TEST_CASE("train loop: an iteration run evaluates at step 0, every N steps and at the end", "[samples][loop]") {
  ToyTask task;
  samples::LoopOptions o = options(7);
  o.eval_every = 3;
  const samples::LoopResult r = run_loop(o, task);
  CHECK(r.finished);
  CHECK(r.step == 7);
  CHECK(task.evaluated_at == std::vector<int64_t>{0, 3, 6, 7});
  CHECK(task.epochs_ended.empty());
}

TEST_CASE("train loop: an epoch run ends each epoch, then evaluates", "[samples][loop]") {
  ToyTask task;
  samples::LoopOptions o = options(6);
  o.steps_per_epoch = 3;
  run_loop(o, task);
  CHECK(task.epochs_ended == std::vector<int64_t>{0, 1});
  CHECK(task.evaluated_at == std::vector<int64_t>{3, 6});
}

TEST_CASE("train loop: a run stopped and resumed equals the run straight through", "[samples][loop]") {
  minidl::testing::TempDir dir;
  ToyTask straight;
  run_loop(options(5), straight);

  ToyTask first;
  samples::LoopOptions o = options(5);
  o.stop_after = 2;
  o.checkpoint = dir.file("ck.safetensors");
  const samples::LoopResult r1 = run_loop(o, first);
  CHECK_FALSE(r1.finished);
  CHECK(r1.step == 2);

  ToyTask second;
  o.stop_after = 0;
  o.resume = o.checkpoint;
  const samples::LoopResult r2 = run_loop(o, second);
  CHECK(r2.finished);
  CHECK(r2.run_here == 3);
  CHECK(second.model_->weight.to_vector<float>() == straight.model_->weight.to_vector<float>());

  // Longer continues; shorter than the checkpoint's step is refused, naming both.
  ToyTask longer;
  o.steps = 9;
  CHECK(run_loop(o, longer).step == 9);
  ToyTask shorter;
  o.steps = 4;
  CHECK_THAT(error_message([&] { run_loop(o, shorter); }),
             Catch::Contains("it is at step 9, beyond this run's end at step 4 (--steps)"));
  // Another program's checkpoint is refused.
  ToyTask other;
  o.steps = 9;
  o.program = "another";
  CHECK_THAT(error_message([&] { run_loop(o, other); }), Catch::Contains("written by toy, not by another"));
}

TEST_CASE("train loop: the first non-finite loss stops the run, naming the last good checkpoint", "[samples][loop]") {
  minidl::testing::TempDir dir;
  ToyTask task;
  task.losses = {1.0, 0.9, 0.8, std::numeric_limits<double>::quiet_NaN()};
  samples::LoopOptions o = options(10);
  o.checkpoint = dir.file("ck.safetensors");
  o.checkpoint_every = 2;
  CHECK_THAT(error_message([&] { run_loop(o, task); }),
             Catch::Contains("toy: the training loss is NaN at step 4") &&
                 Catch::Contains(o.checkpoint + " keeps the state saved at step 2, before the divergence"));
  CHECK(io::load_checkpoint(o.checkpoint).step == 2);

  ToyTask eval_nan;
  eval_nan.eval_loss = [](int64_t step) { return step >= 4 ? std::numeric_limits<double>::infinity() : 0.5; };
  o = options(10);
  o.eval_every = 2;
  CHECK_THAT(error_message([&] { run_loop(o, eval_nan); }),
             Catch::Contains("the test loss is +Inf at step 4") && Catch::Contains("No checkpoint was asked for"));
}

TEST_CASE("train loop: bad options are errors naming the flag", "[samples][loop]") {
  ToyTask task;
  std::ostringstream out;
  samples::LoopOptions o = options(5);
  o.checkpoint_every = 2;
  CHECK_THAT(error_message([&] { samples::TrainLoop(o, task, out); }),
             Catch::Contains("--checkpoint-every needs --checkpoint"));
  o = options(-1);
  CHECK_THAT(error_message([&] { samples::TrainLoop(o, task, out); }), Catch::Contains("--steps gives -1 steps"));
}

TEST_CASE("the --device flag: unknown names and one device for several processes are refused before any process group",
          "[samples][loop]") {
  CHECK_THAT(error_message([] { samples::resolve_device("gpu0"); }),
             Catch::Contains("--device 'gpu0'") && Catch::Contains("(or auto: CUDA when available)"));
  CHECK_THAT(error_message([] { samples::process_group_for("nonsense"); }), Catch::Contains("--device 'nonsense'"));
  CHECK_THAT(error_message([] { samples::process_group_for("cuda:0"); }),
             Catch::Contains("each process trains on cuda:<its local rank>") && Catch::Contains("pass --device cuda"));
  CHECK(samples::resolve_device("cpu") == Device::cpu());
}
