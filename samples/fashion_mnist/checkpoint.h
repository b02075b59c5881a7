// The Fashion-MNIST trainer's checkpoint: a library checkpoint (io/checkpoint.h: model,
// optimizer with its groups, schedule, generators, step) plus the trainer's own entries, kept as
// run.<key> metadata:
//   hp.*                    the run's hyperparameters (architecture, optimizer, lr, ...)
//   loader.*                the DataLoader position (epoch, next batch) and what it depends on
//   epoch.loss_sum/samples  the running train loss of an interrupted epoch (the training loop's)
//   history                 the metrics of the finished epochs, CSV rows
// Checkpoint below is the typed view of one file, for the tests and for tools; the trainer
// writes and reads the same entries through write_run_entries / read_run_entries.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "data/dataloader.h"
#include "io/checkpoint.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "samples/fashion_mnist/trainer.h"

namespace minidl::fashion_mnist {

// The trainer's own entries.
struct RunEntries {
  data::DataLoaderState loader;
  std::vector<EpochMetrics> history;
};
// Refuses (a minidl::Error, nothing written) a history holding a NaN or infinite number.
void write_run_entries(const RunEntries& entries, io::Metadata& metadata);
RunEntries read_run_entries(const io::Metadata& metadata, const std::string& path);

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
// and naming the tensor for one whose weights or optimizer state hold NaN or Inf. Reads the
// version 1 layout ("fashion_mnist/1") too.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace minidl::fashion_mnist
