// The trainer's checkpoint: one safetensors file (io/safetensors.h) that Python's safetensors
// reads too. Tensors:
//   model.<name>            the model's state_dict ("model.0.weight", ...)
//   optimizer.<param>.<e>   the optimizer's buffers ("optimizer.0.weight.momentum_buffer")
// and in __metadata__ (strings; doubles written in their shortest exact form, so they read
// back bit for bit):
//   minidl.checkpoint       "fashion_mnist/1", the layout version
//   hp.*                    the run's hyperparameters (architecture, optimizer, lr, ...)
//   optimizer.*             optimizer name, group lrs, hyperparameters, step counters
//   scheduler.*             schedule name, last_epoch, base and last lrs, hyperparameters
//   generator.seed/offset   the default generator
//   loader.*                the DataLoader position (epoch, next batch) and what it depends on
//   epoch.loss_sum/samples  the running train loss of an interrupted epoch
//   history                 the metrics of the finished epochs, CSV rows
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "data/dataloader.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "samples/fashion_mnist/trainer.h"

namespace minidl::fashion_mnist {

struct Checkpoint {
  std::map<std::string, std::string> hyperparameters;  // "architecture" -> "784-256-128-10", ...
  nn::StateDict model;
  optim::OptimizerState optimizer;
  std::optional<optim::LRSchedulerState> scheduler;  // none with --schedule none
  GeneratorState generator;
  data::DataLoaderState loader;
  double epoch_loss_sum = 0;  // sum of loss x batch size over the batches of loader.epoch done so far
  int64_t epoch_samples = 0;
  std::vector<EpochMetrics> history;
};

// Atomic: a crash while saving leaves the previous file at `path` intact. Refuses (a
// minidl::Error naming the tensor or value, the file untouched) a state holding NaN or Inf.
void save_checkpoint(const Checkpoint& c, const std::string& path);
// Throws a minidl::Error naming the file and the key for a file that is not such a checkpoint,
// and naming the tensor for one whose weights or optimizer state hold NaN or Inf.
Checkpoint load_checkpoint(const std::string& path);

// Exact text of a double and back (std::to_chars shortest form: parses to the same bits).
std::string format_exact(double v);
double parse_double(const std::string& text, const std::string& what);

}  // namespace minidl::fashion_mnist
