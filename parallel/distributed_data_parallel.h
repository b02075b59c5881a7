// parallel::DistributedDataParallel: trains one model with one process per device — the
// processes of a ProcessGroup (parallel/process_group.h), started by mpirun or srun. Each process
// holds the whole model, runs it on its own part of the global batch, and after backward holds
// the gradient of the global batch: gradients are averaged over the ranks in buckets, launched by
// gradient-ready hooks while backward still runs — DataParallel's GradientReducer, with the
// process group as its communicator. Every process then applies the same optimizer step to the
// same parameters, so the models stay equal without being broadcast again.
//
//   auto group = parallel::make_process_group();             // MPI (CPU) or NCCL (cuda:<local rank>)
//   model->to(group->device());
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, group);
//   optim::SGD optimizer(ddp->parameters(), ...);
//
// Two ways to give each rank its rows:
//   - every rank builds the same global batch (the loader's order is a function of (seed,
//     epoch)) and trains on its shard of it — the samples' way, exact for any split:
//       parallel::BatchShard shard = ddp->shard(x.size(0));       // rows [n*rank/world, n*(rank+1)/world)
//       optimizer.zero_grad();
//       Tensor loss = criterion(ddp->forward(x, shard), shard.of(y));
//       loss.backward(); optimizer.step();
//       double shown = ddp->global_mean(loss);                    // the global batch's mean loss
//   - each rank loads its own batch (data::DistributedSampler, equal shards) and calls
//     (*ddp)(x): PyTorch's way; the gradients are then the plain average over the ranks, the
//     global batch's gradient when every rank's batch has the same number of rows.
// A forward on a shard does two things a plain forward does not: dropout draws the shard's rows
// of the whole batch's mask (Note [random draws of a batch shard] in core/generator.h), and
// backward weights this rank's gradient by rows * world / total, so that uneven shards still
// average to the global batch's gradient (Note [a shard's gradient weight] in
// parallel/gradient_reducer.cpp).
//
// At construction: the parameters and buffers of rank 0 are broadcast to every rank, after a
// check that every rank holds the same parameter and buffer names, shapes and dtypes in the same
// order (an all-gather of each rank's list; a difference is an error on every rank that names
// the first differing entry and the ranks, never a hang). Buffers are broadcast from rank 0 again
// at each forward in training mode (PyTorch's broadcast_buffers). A parameter that gets no
// gradient on any rank keeps its .grad, as on one device (Note [which parameters got a gradient]
// in parallel/gradient_reducer.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/batch_shard.h"
#include "parallel/gradient_reducer.h"
#include "parallel/process_group.h"

namespace minidl::parallel {

struct DistributedDataParallelOptions {
  size_t bucket_cap_bytes = 25 * 1024 * 1024;  // as DataParallelOptions (PyTorch DDP's default)
};

class DistributedDataParallel : public nn::Module {
 public:
  // The model must already be on group->device().
  DistributedDataParallel(std::shared_ptr<nn::Module> model, std::shared_ptr<ProcessGroup> group,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;

  // The model's forward on this rank's own x. The backward of its output averages the
  // gradients over the ranks (unless the forward ran under no_sync()).
  Tensor forward(const Tensor& x) override;

  // This rank's shard of a global batch of `total` rows: rows [total*rank/world,
  // total*(rank+1)/world) (BatchShard::part_of). Throws when total < world.
  BatchShard shard(int64_t total) const;
  // The model's forward on `shard` of `batch`, the global batch [shard.total, ...] every rank
  // built alike; returns this rank's output rows. Dropout draws the shard's rows of the whole
  // batch's mask, and the backward of the output weights this rank's gradient by its share of
  // the batch before averaging (the comment at the top of this file).
  Tensor forward(const Tensor& batch, const BatchShard& shard);
  // The global batch's mean of `loss`, the mean over this rank's rows of its last forward:
  // Σ_ranks (rows / total) * loss (or the plain average after forward(x)). Collective: every
  // rank calls it; it reads the loss on the host.
  double global_mean(const Tensor& loss);
  std::string name() const override;
  std::shared_ptr<nn::Module> clone() const override;  // throws: wrap a clone of the model instead

  // Gradient accumulation: while the returned guard lives, forwards make backwards that do not
  // reduce — .grad accumulates locally — and the first backward after it reduces the sum of
  // everything accumulated (PyTorch's `with ddp.no_sync():`).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  const std::shared_ptr<nn::Module>& module() const { return model_; }
  ProcessGroup& process_group() const { return *group_; }
  const std::vector<GradientBucket>& buckets() const { return reducer_->buckets(); }
  const GradientSyncStats& last_gradient_sync() const { return reducer_->last_sync(); }

  // Copies rank 0's parameters and buffers into every rank (the constructor does it).
  void broadcast_state();

 private:
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<ProcessGroup> group_;
  Tensor run(const Tensor& x, double gradient_weight, int64_t batch_rows = 0);

  std::shared_ptr<GradientReducer> reducer_;
  bool sync_ = true;
  std::optional<BatchShard> last_shard_;  // of the last forward, for global_mean
};

// Checks that every rank of `group` passed the same `lines` (a model's parameter list, a
// program's flags): an all-gather of a digest, then, only when they differ, of the lines
// themselves, so that every rank throws the same minidl::Error naming `what`, the first
// differing line and the ranks. Collective: every rank must call it.
void check_same_on_every_rank(ProcessGroup& group, const std::string& what, const std::vector<std::string>& lines);

}  // namespace minidl::parallel
