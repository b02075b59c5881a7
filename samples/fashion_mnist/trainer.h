// The Fashion-MNIST trainer behind samples/fashion_mnist/main.cpp, as a small library so the
// tests can run it: an MLP (784, hidden..., 10 with ReLUs), or with model = "cnn" the CNN of
// make_cnn (conv, batch norm, max pooling, dropout), trained with SGD momentum or AdamW
// under a cosine, step or constant schedule; test loss and accuracy after every epoch; a
// metrics CSV and a gnuplot figure; and one safetensors checkpoint holding everything a run
// needs to continue bit-identically on the CPU (samples/fashion_mnist/checkpoint.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "samples/common/profile_window.h"
#include "samples/common/progress.h"

namespace minidl::parallel {
class ProcessGroup;
}

namespace minidl::fashion_mnist {

using samples::ProgressStyle;  // Bar, Lines, Quiet (samples/common/progress.h)

struct TrainerConfig {
  // The defaults reach >= 89% test accuracy in 10 epochs (bench/RESULTS.md has the run);
  // bench/torch_fashion_mnist.py uses the same ones.
  int64_t epochs = 10;
  int64_t batch_size = 64;
  double lr = 0.05;
  std::string optimizer = "sgd";  // "sgd" (momentum) or "adamw"
  double momentum = 0.9;          // SGD only
  double weight_decay = 5e-4;
  std::string schedule = "cosine";  // "cosine" (T_max = epochs), "step" (x0.1 every epochs/3), "none"
  std::vector<int64_t> hidden = {256, 128};
  // "mlp" (Linear layers of `hidden` sizes) or "cnn" (make_cnn: two conv-BN-ReLU-pool blocks,
  // dropout and two Linear layers; the same defaults reach 92.59% in 10 epochs on the CPU).
  std::string model = "mlp";
  std::string device = "auto";        // "cpu", "cuda[:N]", "auto" (CUDA when available)
  DType dtype = DType::Float32;       // --dtype: fp32, or bf16/fp16 autocast (samples/common/precision.h)
  std::vector<std::string> devices;   // several devices: data parallel (parallel::DataParallel)
  uint64_t seed = 0;                  // weights and shuffling

  std::string data_dir;       // empty: where Debian installs Fashion-MNIST
  int64_t limit = 0;          // train on the first `limit` examples (0: all 60000)
  int64_t test_limit = 0;     // evaluate on the first `test_limit` test examples (0: all 10000)
  int workers = 0;            // DataLoader worker threads

  std::string checkpoint;        // saved (atomically) after every epoch when set
  int64_t checkpoint_every = 0;  // also save every N batches within an epoch (0: only at epoch ends)
  std::string resume;            // continue from this checkpoint
  std::string metrics;           // CSV: epoch,train_loss,test_loss,test_acc,samples_per_s,lr
  std::string plot;              // PNG of the loss and accuracy curves (gnuplot)
  // Stop this process after this many training batches (0: never), saving the checkpoint
  // first: splits a run in pieces that --resume joins (the resume test uses it).
  int64_t stop_after_batches = 0;
  ProgressStyle progress = ProgressStyle::Lines;
  // Several processes (started by mpirun/srun; parallel::DistributedDataParallel): this run's
  // process group. Every process loads the same batches and trains on its shard of each (Note
  // [a shard of every batch] in trainer.cpp), so the global batch is --batch-size as in one
  // process; rank 0 alone evaluates and writes metrics, plots and checkpoints; every rank resumes
  // from the checkpoint. Null: one process.
  std::shared_ptr<parallel::ProcessGroup> group;
  // --profile: record profile.steps training steps after profile.warmup (table on `out`, Chrome
  // trace to profile.trace; samples/common/profile_window.h). With several processes, rank 0's.
  samples::ProfileOptions profile;
  // --cuda-graph: after one eager step, every full batch's step is a replay of a CUDA graph
  // (core/cuda_graph.h; Note [a captured step] in trainer.cpp). One CUDA device, the MLP, SGD.
  bool cuda_graph = false;
};

// One row of the metrics CSV. train_loss is the mean over the epoch's examples; lr is the lr
// the epoch trained with; samples_per_s counts the training pass only (not the evaluation).
struct EpochMetrics {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, test_loss = 0, test_acc = 0, samples_per_s = 0, lr = 0;
};

struct Datasets {
  std::shared_ptr<const data::TensorDataset> train, test;
};

struct TrainingResult {
  std::vector<EpochMetrics> history;  // every finished epoch, those before a resume included
  bool finished = false;              // all epochs done (false when stop_after_batches cut it)
  std::shared_ptr<nn::Sequential> model;
};

// "784-256-128-10" for hidden {256, 128}: how checkpoints name the architecture.
std::string architecture_name(const std::vector<int64_t>& hidden);
// Linear(784, h0), ReLU, ..., Linear(h_last, 10); weights drawn from the default generator.
std::shared_ptr<nn::Sequential> make_mlp(const std::vector<int64_t>& hidden);

// The CNN of --model cnn, on the flattened [N, 784] input: Unflatten to [N, 1, 28, 28],
// conv(1->32, 3x3, pad 1)-BN-ReLU-maxpool 2, conv(32->64, 3x3, pad 1)-BN-ReLU-maxpool 2,
// flatten, dropout 0.25, Linear(3136->128)-ReLU, Linear(128->10).
std::shared_ptr<nn::Sequential> make_cnn();
// "cnn-c32-c64-f128-10": how checkpoints name it.
std::string cnn_architecture_name();
// make_mlp(config.hidden) or make_cnn() as config.model says.
std::shared_ptr<nn::Sequential> make_model(const TrainerConfig& config);

// Fashion-MNIST from config.data_dir (or Debian's folder), normalised and flattened, the
// training split cut to config.limit and the test split to config.test_limit.
Datasets load_datasets(const TrainerConfig& config);

// Checks the config (clear errors for bad values, for several devices, for a checkpoint of
// another architecture or other hyperparameters), then trains on the shared training loop
// (samples/common/train_loop.h), writing progress to `out`. A run resumed with a larger
// --epochs continues with the schedule it was started with (its horizon is in the checkpoint).
TrainingResult train(const TrainerConfig& config, const Datasets& data, std::ostream& out);

}  // namespace minidl::fashion_mnist
