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
// Every process builds the same global batch, so a run over processes trains on the batches of
// a run in one process (docs/distributed.md). The optimizer, checkpoints and evaluation use
// module(), the model itself (DataParallel's replica 0, DistributedDataParallel's model).
// It lives beside the samples, not in the library: which wrapper a program wants is a choice of
// its flags; the library gives the parts (BatchShard, DataParallel, DistributedDataParallel).
#pragma once

#include <memory>
#include <vector>

#include "nn/module.h"
#include "parallel/batch_shard.h"

namespace minidl::parallel {
class DataParallel;
class DistributedDataParallel;
class ProcessGroup;
}  // namespace minidl::parallel

namespace minidl::samples {

class ParallelModel {
 public:
  // `model` already on its device: devices[0] for replicas, group->device() for processes.
  // Several `devices`: DataParallel over them; a `group` of several processes:
  // DistributedDataParallel; otherwise the model itself. Both at once is an error.
  ParallelModel(std::shared_ptr<nn::Module> model, const std::vector<Device>& devices,
                std::shared_ptr<parallel::ProcessGroup> group);
  ~ParallelModel();

  // This process's rows of a batch of `total` rows (every row in one process).
  parallel::BatchShard shard(int64_t total) const;
  // The forward on `shard` of the global `batch`: this process's output rows.
  Tensor forward(const Tensor& batch, const parallel::BatchShard& shard);
  // The global batch's mean of `loss` (the mean over this process's rows); collective over processes.
  double global_mean(const Tensor& loss);

  nn::Module& module() const { return *model_; }
  // This process evaluates and writes the outputs (rank 0, or the only process).
  bool lead() const { return rank_ == 0; }

 private:
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<parallel::DataParallel> replicas_;
  std::shared_ptr<parallel::DistributedDataParallel> processes_;
  int rank_ = 0;
};

}  // namespace minidl::samples
