// distributed_data_parallel: the tutorial's DataParallel example with one process per device —
// started by an MPI launcher, `mpirun -n 2 distributed_data_parallel` (docs/distributed.md).
// Model, data, SGD (lr 0.01) and cross-entropy are seed_train's. Each process trains its own
// shard (data::DistributedSampler) with a per-process batch of --batch-size / world size, so the
// global batch is --batch-size, and DistributedDataParallel averages the gradients: with the same
// --seed it prints seed_train's loss lines (to float rounding) when the world size divides the
// dataset (100 examples) and the batch. Rank 0 prints; every rank computes.
// Device: cuda:<local rank> when the machine has GPUs (NCCL), else the CPU (MPI).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "core/ops.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "parallel/parallel.h"
#include "samples/common/flags.h"
#include "samples/common/seed_model.h"

using namespace minidl;

// PyTorch: class SimpleModel(nn.Module) — the seed tutorial's model (samples/common/seed_model.h).
using samples::SimpleModel;

int main(int argc, char** argv) {
  CLI::App app{"minidl tutorial example 1 over processes: the seed trainer wrapped in DistributedDataParallel"};
  int epochs = 10;
  int64_t batch_size = 10;
  double lr = 0.01;
  uint64_t seed = 0;
  app.add_option("--epochs", epochs, "passes over the dataset")->check(samples::positive_integer<int>());
  app.add_option("--batch-size", batch_size, "samples per global batch (over all processes)")->check(samples::positive_integer<int64_t>());
  app.add_option("--lr", lr, "SGD learning rate")->check(samples::non_negative_real());
  app.add_option("--seed", seed, "seed for the weights, the data and the shuffling")->check(samples::seed_value());
  if (const int status = samples::parse_flags(app, argc, argv, "distributed_data_parallel"); status >= 0) return status;

  int rank = 0, world = 1;
  try {
    // PyTorch: dist.init_process_group(...); the launcher gave every process its rank.
    std::shared_ptr<parallel::ProcessGroup> group = parallel::make_process_group();
    rank = group->rank();
    world = group->world_size();
    const Device device = group->device();  // cuda:<local rank>, or the CPU
    // Every rank must run with the same flags: a clear error naming the first that differs.
    parallel::check_same_on_every_rank(*group, "distributed_data_parallel's flags",
                                       {"epochs " + std::to_string(epochs), "batch-size " + std::to_string(batch_size),
                                        "lr " + std::to_string(lr), "seed " + std::to_string(seed)});
    MINIDL_CHECK(batch_size % world == 0, "a global batch of ", batch_size,
                 " cannot be split evenly over ", world, " processes; choose --batch-size as a multiple of ", world);
    const int64_t local_batch = batch_size / world;
    if (rank == 0) std::printf("%d process(es), %s process group; rank 0 on %s\n", world, group->backend_name().c_str(),
                               device.str().c_str());

    manual_seed(seed);
    auto model = std::make_shared<SimpleModel>();
    model->to(device);
    // PyTorch: model = DDP(model, device_ids=[local_rank])   (rank 0's weights are broadcast)
    auto ddp = std::make_shared<parallel::DistributedDataParallel>(model, group);

    auto dataset = data::make_random_classification(100, 10, 2, seed);
    // PyTorch: DistributedSampler(dataset) — this rank's shard, reshuffled by set_epoch.
    data::DistributedSampler sampler(dataset->size(), world, rank, data::DistributedSamplerOptions{.seed = seed});
    nn::CrossEntropyLoss criterion;
    optim::SGD optimizer(ddp->parameters(), optim::SGDOptions{.lr = lr});

    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      const std::vector<int64_t> shard = sampler.indices();
      double running_loss = 0.0;
      int i = 0;
      for (size_t start = 0; start < shard.size(); start += static_cast<size_t>(local_batch), ++i) {
        const size_t end = std::min(shard.size(), start + static_cast<size_t>(local_batch));
        data::Batch batch = dataset->get_batch(std::vector<int64_t>(shard.begin() + static_cast<std::ptrdiff_t>(start),
                                                                    shard.begin() + static_cast<std::ptrdiff_t>(end)));
        Tensor inputs = batch.x.to(device), labels = batch.y.to(device);
        optimizer.zero_grad();
        Tensor loss = criterion((*ddp)(inputs), labels);  // the mean over this rank's shard of the batch
        loss.backward();                                   // gradients averaged over the ranks, in buckets
        optimizer.step();                                  // the same step on every rank
        running_loss += loss.item();
        if (i % 10 == 9) {
          // The global batch's loss is the ranks' average (equal shards): one small all-reduce.
          // float64 where the device computes in it (the CPU); CUDA collectives carry float32.
          Tensor sum = full(Shape{1}, running_loss / 10,
                            TensorOptions(device.is_cuda() ? DType::Float32 : DType::Float64, device));
          group->all_reduce_(sum, parallel::ReduceOp::Average);
          if (rank == 0) std::printf("[%d, %5d] loss: %.3f\n", epoch + 1, i + 1, sum.item());
          running_loss = 0.0;
        }
      }
    }
    if (rank == 0) std::printf("Finished Training\n");
  } catch (...) {
    // An error of this rank alone would leave the others in a collective (or in the group's
    // set-up, before world is known): end the job whenever a launcher started several processes.
    // One line whatever was thrown (samples/common/flags.h), with the rank after the name.
    const std::string prefix = "distributed_data_parallel:";
    const std::string line = samples::failure_line("distributed_data_parallel", "training");
    const std::string message = prefix + " rank " + std::to_string(rank) + ":" + line.substr(prefix.size());
    if (world > 1 || parallel::launched_with_several_processes()) parallel::abort_job(1, message);
    std::cerr << message << "\n";
    return 1;
  }
  return 0;
}
