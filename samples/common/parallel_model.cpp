// samples::ParallelModel: the choice of wrapper, and the calls of a step for each; the device
// and process group a program's --device asks for.
#include "samples/common/parallel_model.h"

#include "parallel/data_parallel.h"
#include "parallel/process_group.h"

namespace minidl::samples {

Device resolve_device(const std::string& flag_value) {
  if (flag_value == "auto") return default_device();
  try {
    return Device(flag_value);
  } catch (const Error& e) {
    throw Error("--device '" + flag_value + "': " + e.what() + " (or auto: CUDA when available)");
  }
}

std::shared_ptr<parallel::ProcessGroup> process_group_for(const std::string& device_flag) {
  const Device asked = resolve_device(device_flag);  // an unknown name fails here, on every rank alike
  MINIDL_CHECK(device_flag == "auto" || device_flag == "cpu" || device_flag == "cuda", "--device ", device_flag,
               ": over several processes each process trains on cuda:<its local rank>; pass --device cuda (or cpu, "
               "or auto), not one device for all");
  if (device_flag == "auto") return parallel::make_process_group();
  if (asked.is_cpu()) return parallel::make_mpi_process_group();
  const std::shared_ptr<parallel::ProcessGroup> cpu = parallel::make_mpi_process_group();
  const Device device = parallel::process_device(*cpu);
  MINIDL_CHECK(device.is_cuda(), "--device cuda: this machine has no CUDA device for local rank ", cpu->local_rank());
  return parallel::make_nccl_process_group(device);
}

ParallelModel::ParallelModel(std::shared_ptr<nn::Module> model, const std::vector<Device>& devices,
                             std::shared_ptr<parallel::ProcessGroup> group, RankBatches batches)
    : model_(std::move(model)), batches_(batches) {
  MINIDL_CHECK(model_ != nullptr, "ParallelModel: got a null model");
  const bool several_processes = group && group->world_size() > 1;
  MINIDL_CHECK(!(several_processes && devices.size() > 1), "ParallelModel: both replicas (", devices.size(),
               " devices) and ", group ? group->world_size() : 1,
               " processes were asked for; train over processes with one device each");
  if (devices.size() > 1) replicas_ = std::make_shared<parallel::DataParallel>(model_, devices);
  if (several_processes) {
    processes_ = std::make_shared<parallel::DistributedDataParallel>(model_, group);
    rank_ = group->rank();
    world_ = group->world_size();
  }
}

ParallelModel::~ParallelModel() = default;

parallel::BatchShard ParallelModel::shard(int64_t total) const {
  return processes_ && batches_ == RankBatches::ShardOfGlobalBatch ? processes_->shard(total)
                                                                   : parallel::BatchShard::whole(total);
}

Tensor ParallelModel::forward(const Tensor& batch, const parallel::BatchShard& shard) {
  if (processes_) return batches_ == RankBatches::OwnBatches ? processes_->forward(batch) : processes_->forward(batch, shard);
  MINIDL_CHECK(shard.is_whole(), "ParallelModel: a shard of rows [", shard.begin, ", ", shard.begin + shard.rows,
               ") in one process; shards of a batch are the processes'");
  return replicas_ ? (*replicas_)(batch) : (*model_)(batch);
}

double ParallelModel::global_mean(const Tensor& loss) {
  return processes_ ? processes_->global_mean(loss) : loss.item();
}

std::unique_ptr<parallel::DistributedDataParallel::NoSyncGuard> ParallelModel::no_sync() {
  if (!processes_) return nullptr;
  return std::make_unique<parallel::DistributedDataParallel::NoSyncGuard>(*processes_);
}

}  // namespace minidl::samples
