// samples::TrainLoop: the one training loop every trainer of samples/ runs. A trainer supplies
// what is its own — its model, optimizer and schedule, one training step, its evaluation, the
// entries it adds to the checkpoint — as a TrainingTask; the loop does the jobs they share:
//
//   resume        the checkpoint (io/checkpoint.h) read and checked against this run (program,
//                 hyperparameters, a step count not past the run's end), then every piece of
//                 state restored: model, optimizer, schedule, generators, the task's own
//   each step     task.train_step(): shard, forward, backward, update, per-step schedule; the
//                 loss checked (the first non-finite one stops the run: Note [a diverged run stops])
//   epoch end     task.end_epoch() (a per-epoch schedule), then the evaluation (epoch runs)
//   evaluation    every eval_every steps, at step 0 and at the end (iteration runs); the lead
//                 process evaluates, every process records; then the checkpoint
//   checkpoint    also every checkpoint_every steps, before a stop_after stop and at the end; the
//                 lead writes
//   profiler      a window of steps after a warm-up (samples/common/profile_window.h), the lead's
//   progress      a bar on a terminal, the task's lines (samples/common/progress.h)
//
// It lives beside the samples, not in the library: when to evaluate and what to print are a
// program's choices (PyTorch leaves its loop to the user too); the library gives the parts it
// is built from — checkpoints, the profiler, DataParallel and DistributedDataParallel.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "io/checkpoint.h"
#include "samples/common/profile_window.h"
#include "samples/common/progress.h"

namespace minidl::samples {

struct LoopOptions {
  std::string program{};          // "char_gpt": prefixes every message; the checkpoint's writer
  int64_t steps = 0;              // optimizer steps of the whole run
  const char* steps_flag = "";    // the flag that sets them ("--iters", "--epochs"), for messages
  int64_t steps_per_epoch = 0;    // > 0: an epoch-based run (end_epoch, evaluation, checkpoint per epoch)
  int64_t eval_every = 0;         // > 0: evaluate and checkpoint at step 0, every N steps and at the end
  int64_t checkpoint_every = 0;   // > 0: also checkpoint every N steps (of the epoch, in an epoch run)
  int64_t stop_after = 0;         // > 0: stop after N steps in this process, checkpointing first
  std::string checkpoint{};       // the checkpoint's path (written by the lead process); empty: none
  std::string resume{};           // the checkpoint to continue from; empty: a new run
  bool lead = true;               // this process evaluates, prints and writes (rank 0)
  bool print_speed = false;       // end with "N iterations in S s, M ms/iter, peak resident memory"
  std::optional<Device> device{};  // the model's device: adds its allocator's peak in tensors to that line
  ProgressStyle progress = ProgressStyle::Lines;
  ProfileOptions profile{};
};

struct StepResult {
  double loss = 0;       // the step's loss as shown: the global batch's mean
  int64_t examples = 0;  // examples in the global batch (weights the epoch's mean loss); 0: one
};

// Where an evaluation falls and what the epoch around it did (epoch runs).
struct EvalAt {
  int64_t step = 0;          // steps done
  int64_t epoch = -1;        // the 0-based epoch just ended, or -1 (iteration runs)
  double train_loss = 0;     // the epoch's mean training loss
  double lr = 0;             // the lr the epoch started with
  double seconds = 0;        // this process's wall time in the epoch's steps
  int64_t examples = 0;      // examples of the epoch trained in this run
};

using NamedValues = std::vector<std::pair<std::string, double>>;  // {"test loss", 0.42}, ...

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;
  // The parts every checkpoint holds (io::capture_training_state).
  virtual io::TrainingState training_state() = 0;
  // What a checkpoint must agree with to be continued (stored as run.hp.<key>). Leave out the
  // run's length (--iters, --epochs): a longer run may continue a shorter one.
  virtual std::map<std::string, std::string> hyperparameters() const = 0;
  // One optimizer step.
  virtual StepResult train_step() = 0;
  // The end of epoch `epoch` (0-based), before its evaluation: a per-epoch schedule steps here.
  virtual void end_epoch(int64_t /*epoch*/) {}
  // The lead process's evaluation: named values, each of which must be finite.
  virtual NamedValues evaluate(const EvalAt& at) = 0;
  // Every process: keeps the evaluation (the lead's values; zeros elsewhere) and returns the
  // line to print.
  virtual std::string record(const EvalAt& at, const NamedValues& values) = 0;
  // "iteration 12", "epoch 2, batch 3 of 938": where a run stands after `step` steps.
  virtual std::string where(int64_t step) const = 0;
  // The task's own checkpoint entries (metadata, generators besides the default one) and
  // reading them back. prepare_resume() runs before anything is restored: the place to rebuild
  // a schedule with the horizon stored in the checkpoint (Note [a longer run keeps its schedule]).
  virtual void save_state(io::Checkpoint& checkpoint) const = 0;
  virtual void prepare_resume(io::Checkpoint& /*checkpoint*/) {}
  virtual void load_state(const io::Checkpoint& checkpoint) = 0;
  virtual double lr() const = 0;  // the lr of the next step, for messages
};

struct LoopResult {
  int64_t step = 0;          // steps done (the checkpoint's position)
  int64_t run_here = 0;      // steps this process ran
  double seconds = 0;        // their wall time
  bool finished = false;     // all steps done (false when stop_after cut the run)
  double ms_per_step() const { return run_here > 0 ? 1000.0 * seconds / static_cast<double>(run_here) : 0.0; }
};

class TrainLoop {
 public:
  // Checks the options (a clear error naming the flag). `out` receives progress and lines.
  TrainLoop(LoopOptions options, TrainingTask& task, std::ostream& out);

  // With options.resume: reads the checkpoint and restores everything (a no-op without it).
  void resume();
  LoopResult run();
  int64_t step() const { return step_; }

 private:
  void evaluate(EvalAt at);
  void save();
  [[noreturn]] void diverged(const std::string& what, double value, const std::string& where) const;
  std::string prefix() const { return options_.program + ": "; }

  LoopOptions options_;
  TrainingTask& task_;
  std::ostream& out_;
  Progress progress_;
  int64_t step_ = 0;
  bool resumed_ = false;
  // The epoch in progress (epoch runs): its loss sum weighted by examples, kept in the checkpoint
  // so that a resumed epoch reports the same mean.
  double epoch_loss_sum_ = 0;
  int64_t epoch_examples_ = 0;
  std::string last_save_;  // where(step) of this process's last save, for the divergence message
  int64_t saved_at_ = -1;  // the step of that save
};

// A whole run: TrainLoop(options, task, out), resume() (with options.resume), run().
LoopResult run_training(LoopOptions options, TrainingTask& task, std::ostream& out);

}  // namespace minidl::samples
