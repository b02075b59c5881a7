// samples::ParallelModel: the choice of wrapper, and the three calls of a step for each.
#include "samples/common/parallel_model.h"

#include "parallel/data_parallel.h"
#include "parallel/distributed_data_parallel.h"

namespace minidl::samples {

ParallelModel::ParallelModel(std::shared_ptr<nn::Module> model, const std::vector<Device>& devices,
                             std::shared_ptr<parallel::ProcessGroup> group)
    : model_(std::move(model)) {
  MINIDL_CHECK(model_ != nullptr, "ParallelModel: got a null model");
  const bool several_processes = group && group->world_size() > 1;
  MINIDL_CHECK(!(several_processes && devices.size() > 1), "ParallelModel: both replicas (", devices.size(),
               " devices) and ", group ? group->world_size() : 1,
               " processes were asked for; train over processes with one device each");
  if (devices.size() > 1) replicas_ = std::make_shared<parallel::DataParallel>(model_, devices);
  if (several_processes) {
    processes_ = std::make_shared<parallel::DistributedDataParallel>(model_, group);
    rank_ = group->rank();
  }
}

ParallelModel::~ParallelModel() = default;

parallel::BatchShard ParallelModel::shard(int64_t total) const {
  return processes_ ? processes_->shard(total) : parallel::BatchShard::whole(total);
}

Tensor ParallelModel::forward(const Tensor& batch, const parallel::BatchShard& shard) {
  if (processes_) return processes_->forward(batch, shard);
  MINIDL_CHECK(shard.is_whole(), "ParallelModel: a shard of rows [", shard.begin, ", ", shard.begin + shard.rows,
               ") in one process; shards of a batch are the processes'");
  return replicas_ ? (*replicas_)(batch) : (*model_)(batch);
}

double ParallelModel::global_mean(const Tensor& loss) {
  return processes_ ? processes_->global_mean(loss) : loss.item();
}

}  // namespace minidl::samples
