// A training checkpoint: everything a run needs to continue where it stopped, in one safetensors
// file (io/safetensors.h) that Python's safetensors reads too. The library owns the parts every
// trainer has — the model's parameters and buffers, the optimizer's state with its parameter
// groups, the LR scheduler, named generators, the step count — and validates each on the way
// in and out; a program adds its own strings (hyperparameters, vocabulary, metrics) as metadata.
//
// The file. Tensors:
//   model.<name>               the state dict (parameters and buffers)
//   optimizer.<param>.<entry>  the optimizer's buffers ("optimizer.0.weight.exp_avg")
// __metadata__ (strings; doubles in their shortest exact form, so they read back bit for bit):
//   minidl.checkpoint          "2", this layout's version
//   minidl.program             who wrote it ("char_gpt", "fashion_mnist")
//   step                       optimizer steps taken
//   optimizer.name, .group_lrs, .hp.<k>, .counter.<k>, .groups, .group.<i>.params, .group.<i>.option.<k>
//   scheduler.name ("none" without one), .last_epoch, .base_lrs, .last_lr, .hp.<k>
//   grad_scaler.scale, .growth_tracker, .growth_factor, .backoff_factor, .growth_interval
//                              (only when a float16 run's GradScaler is kept)
//   generator.<name>.seed / .offset
//   run.<key>                  the program's own metadata
//
// Version 1 files (the trainers' own layouts "char_gpt/1" and "fashion_mnist/1", written before
// this one existed) load through upgrade_v1(): their keys are mapped onto this layout.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "io/safetensors.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace minidl::io {

struct Checkpoint {
  std::string program;   // who wrote it; load_checkpoint can insist on one
  int64_t step = 0;      // optimizer steps taken (>= 0)
  nn::StateDict model;
  optim::OptimizerState optimizer;
  std::optional<optim::LRSchedulerState> scheduler;   // none without a schedule
  std::optional<optim::GradScalerState> grad_scaler;  // a float16 run's loss scale; none otherwise
  std::map<std::string, GeneratorState> generators;  // "default" (the default generator), any others by name
  Metadata metadata;                                  // the program's own strings (stored as run.<key>)
};

// Atomic (io/atomic_file.h): a failure leaves the file at `path` as it was. Everything is checked
// before anything is written (Note [a checkpoint holds only finite numbers]): a NaN or infinite
// value in a tensor is refused with the tensor's name and count, in a scheduler or optimizer
// number with its key; so is a negative step or counter, an empty program name, or a metadata
// key that is not valid (empty).
void save_checkpoint(const Checkpoint& checkpoint, const std::string& path);

// Reads and validates a checkpoint; `program`, when not empty, must be the writer. Every number
// read back is checked (integers in range, reals finite, one lr per group, a step >= 0), every
// tensor finite; a file that is not a checkpoint, or is damaged, is refused with a minidl::Error
// naming the file and the key or tensor. Never blocks on a FIFO (load_safetensors refuses it).
Checkpoint load_checkpoint(const std::string& path, const std::string& program = "");

// The state of a model/optimizer/scheduler/grad scaler/default generator in one call, and back:
// capture_training_state fills those fields of a Checkpoint; restore_training_state loads them,
// each load checking before it changes anything (the model's first). A run with an enabled
// scaler resumes only from a checkpoint that has one, and the reverse.
struct TrainingState {
  nn::Module& model;
  optim::Optimizer& optimizer;
  const optim::NamedParameters& names;  // the optimizer's parameters by name (model.named_parameters())
  optim::LRScheduler* scheduler = nullptr;
  optim::GradScaler* grad_scaler = nullptr;  // kept only when enabled (float16)
};
void capture_training_state(const TrainingState& state, Checkpoint& checkpoint);
void restore_training_state(const TrainingState& state, const Checkpoint& checkpoint, const std::string& path);

// Exact text of a double and back: std::to_chars' shortest form parses to the same bits.
std::string format_exact(double v);

// Reads a program's metadata with errors that name the file and the key: what a trainer uses
// for its own run.<key> entries (Checkpoint::metadata) and what load_checkpoint uses itself.
class MetadataReader {
 public:
  MetadataReader(const Metadata& metadata, std::string path) : m_(metadata), path_(std::move(path)) {}
  bool has(const std::string& key) const { return m_.count(key) != 0; }
  const std::string& text(const std::string& key) const;
  // An integer in [min, max].
  int64_t integer(const std::string& key, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  uint64_t unsigned_integer(const std::string& key) const;
  double real(const std::string& key) const;                // a finite number
  std::vector<double> reals(const std::string& key) const;  // comma-separated finite numbers
  // Every "<prefix><rest>" key, as rest -> value.
  std::map<std::string, std::string> with_prefix(const std::string& prefix) const;
  // The same parses for a piece of text found under `key` (e.g. one field of a CSV row).
  int64_t parse_integer(const std::string& text, const std::string& key, int64_t min = INT64_MIN,
                        int64_t max = INT64_MAX) const;
  double parse_real(const std::string& text, const std::string& key) const;
  std::string where(const std::string& key) const { return "checkpoint " + path_ + ", metadata '" + key + "'"; }
  const std::string& path() const { return path_; }

 private:
  const Metadata& m_;
  std::string path_;
};

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
std::vector<std::string> split_text(const std::string& text, char sep);

}  // namespace minidl::io
