// samples::ParallelModel: the model a sample's trainer steps, on one device, over replicas of one
// process (--devices a,b: parallel::DataParallel) or over processes (started by mpirun:
// parallel::DistributedDataParallel) — one training step for the three:
//
//   parallel::BatchShard shard = model.shard(x.size(0));     // this process's rows of the batch
//   optimizer.zero_grad();
//   Tensor loss = criterion(model.forward(x, shard), shard.of(y));
//   loss.backward();                                         // gradients reduced, weighted by the shard
//   optimizer.step();
//   double shown = model.global_mean(loss);                  // the global batch's mean loss
//
// What a process trains on over several processes is one of two named choices (RankBatches):
//   - ShardOfGlobalBatch: every process builds the same global batch and trains on its shard,
//     so a run over processes trains on the batches of a run in one process, bit for bit the
//     same schedule (Fashion-MNIST's choice; docs/distributed.md);
//   - OwnBatches: every process draws a batch of its own (seed + rank) and the gradients are
//     averaged — world x batch rows per step, as nanoGPT under torchrun (the char-GPT's choice).
// The optimizer, checkpoints and evaluation use module(), the model itself (DataParallel's
// replica 0, DistributedDataParallel's model).
//
// It lives beside the samples, not in the library: which wrapper a program wants is a choice of
// its flags; the library gives the parts (BatchShard, DataParallel, DistributedDataParallel).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/batch_shard.h"
#include "parallel/distributed_data_parallel.h"

namespace minidl::parallel {
class DataParallel;
class ProcessGroup;
}  // namespace minidl::parallel

namespace minidl::samples {

enum class RankBatches { ShardOfGlobalBatch, OwnBatches };

// --device as a device: "auto" is CUDA when available, else the CPU; anything else as
// Device(name) reads it ("cpu", "cuda", "cuda:N"), an unknown name an error naming the flag.
Device resolve_device(const std::string& flag_value);

// The process group of a program started with several processes, on the device --device asks
// for: "auto" takes cuda:<local rank> when CUDA devices exist, else the CPU (MPI); "cpu" the
// MPI group; "cuda" the NCCL group on cuda:<local rank>. "cuda:N" and unknown names are errors on
// every rank (each process derives its own device from its local rank), raised before any
// process group exists.
std::shared_ptr<parallel::ProcessGroup> process_group_for(const std::string& device_flag);

class ParallelModel {
 public:
  // `model` already on its device: devices[0] for replicas, group->device() for processes.
  // Several `devices`: DataParallel over them; a `group` of several processes:
  // DistributedDataParallel; otherwise the model itself. Both at once is an error.
  ParallelModel(std::shared_ptr<nn::Module> model, const std::vector<Device>& devices,
                std::shared_ptr<parallel::ProcessGroup> group, RankBatches batches = RankBatches::ShardOfGlobalBatch);
  ~ParallelModel();

  // This process's rows of a batch of `total` rows (every row with OwnBatches or in one process).
  parallel::BatchShard shard(int64_t total) const;
  // The forward on `shard` of `batch`: this process's output rows.
  Tensor forward(const Tensor& batch, const parallel::BatchShard& shard);
  // The global batch's mean of `loss` (the mean over this process's rows); collective over processes.
  double global_mean(const Tensor& loss);
  // Gradient accumulation: while the guard lives, backward does not reduce over processes (a
  // no-op in one process, where nothing is reduced between micro-batches anyway).
  [[nodiscard]] std::unique_ptr<parallel::DistributedDataParallel::NoSyncGuard> no_sync();

  nn::Module& module() const { return *model_; }
  // This process evaluates and writes the outputs (rank 0, or the only process).
  bool lead() const { return rank_ == 0; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }

 private:
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<parallel::DataParallel> replicas_;
  std::shared_ptr<parallel::DistributedDataParallel> processes_;
  RankBatches batches_;
  int rank_ = 0, world_ = 1;
};

}  // namespace minidl::samples
