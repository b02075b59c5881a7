// DataParallel: construction checks, replicas, the per-forward broadcast, scatter, the
// replica threads and the gather.
//
// Note [why replica gradients are summed]
// The loss is computed once, on the gathered output: L = (1/B) Σ_i ℓ_i over the B rows of the
// whole batch. Replica r holds a copy θ_r of the parameters θ and produces only the rows of its
// shard S_r, so backward through the gather gives it ∂L/∂θ_r = (1/B) Σ_{i∈S_r} ∂ℓ_i/∂θ — its
// shard's share of the full-batch gradient, already weighted by |S_r|/B. As every θ_r equals θ,
// ∂L/∂θ = Σ_r ∂L/∂θ_r: the replicas' gradients are SUMMED. Averaging would divide the step by n.
// (DDP-style training, where each replica takes the mean loss of its own shard, needs the
// weighted sum Σ_r (|S_r|/B)·g_r instead — an average only when the shards are equal.)
//
// Note [re-broadcast, not same-update]
// optimizer.step() updates replica 0 only: the optimizer is built over the wrapped model's
// parameters, exactly as in the one-device loop. The other replicas could apply the same update
// themselves, but that needs one optimizer per replica — n copies of the momentum / Adam state,
// kept identical by hand, and a training loop that knows about replicas. Instead each forward
// first broadcasts replica 0's parameters and buffers to the others: one parameter-sized copy per
// step (the volume of the gradient all-reduce), and replicas cannot drift — they are bitwise
// copies of the model whenever they run, whatever changed it (step, load_state_dict, a manual edit).
//
// No per-thread device binding is needed: every op reaches its kernels through
// backend_for(tensor.device()), so a replica thread runs on whichever device its tensors are on.
#include "parallel/data_parallel.h"

#include "core/autocast.h"
#include "core/autograd.h"
#include "parallel/batch_shard.h"
#include "parallel/model_state.h"
#include "parallel/replica_threads.h"
#include "parallel/scatter_gather.h"

namespace minidl::parallel {

namespace {

std::vector<Device> default_devices() {
  const int count = cuda_device_count();
  MINIDL_CHECK(count > 0, "DataParallel: no CUDA device is available to replicate over by default (0 visible); pass "
               "the devices, e.g. parallel::cpu_replicas(n) for n CPU replicas");
  return all_cuda_devices();
}

}  // namespace

std::vector<Device> cpu_replicas(int n) {
  MINIDL_CHECK(n >= 1, "cpu_replicas: need at least one replica, got ", n);
  return std::vector<Device>(static_cast<size_t>(n), Device::cpu());
}

std::vector<Device> all_cuda_devices() {
  std::vector<Device> devices;
  for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(Device::cuda(i));
  return devices;
}

DataParallel::DataParallel(std::shared_ptr<nn::Module> model, DataParallelOptions options)
    : DataParallel(std::move(model), default_devices(), std::move(options)) {}

DataParallel::DataParallel(std::shared_ptr<nn::Module> model, std::vector<Device> devices, DataParallelOptions options)
    : devices_(std::move(devices)) {
  MINIDL_CHECK(model != nullptr, "DataParallel: got a null model");
  check_device_list(devices_, "DataParallel");
  const std::string misplaced = first_tensor_not_on(*model, devices_[0]);
  MINIDL_CHECK(misplaced.empty(), "DataParallel: the model's ", misplaced, ", but replica 0 is the model itself and "
               "runs on the first device ", devices_[0], "; move the model there before wrapping it (model->to(",
               devices_[0], "))");
  check_cuda_devices_exist(devices_, "DataParallel");
  communicator_ = options.communicator ? options.communicator : make_communicator(devices_);
  MINIDL_CHECK(communicator_->devices() == devices_, "DataParallel: the communicator is over ",
               device_list_str(communicator_->devices()), ", the replicas are on ", device_list_str(devices_));

  register_module("module", model);
  replicas_.push_back(model);
  for (size_t r = 1; r < devices_.size(); ++r) {
    std::shared_ptr<nn::Module> copy = model->clone();
    MINIDL_CHECK(copy != nullptr, "DataParallel: ", model->name(), "::clone() returned null");
    copy->to(devices_[r]);
    replicas_.push_back(std::move(copy));
  }
  for (const auto& replica : replicas_) replica_state_.push_back(parameters_and_buffers(*replica));
  for (size_t r = 1; r < replicas_.size(); ++r) {
    bool same = replica_state_[r].size() == replica_state_[0].size();
    for (size_t k = 0; same && k < replica_state_[0].size(); ++k)
      same = replica_state_[r][k].shape() == replica_state_[0][k].shape() &&
             replica_state_[r][k].dtype() == replica_state_[0][k].dtype();
    MINIDL_CHECK(same, "DataParallel: ", model->name(), "::clone() made a module whose parameters and buffers differ "
                 "from the model's (count, shapes or dtypes)");
  }
  broadcast_parameters();

  std::vector<std::vector<Tensor>> params;
  for (const auto& replica : replicas_) params.push_back(replica->parameters());
  reducer_ = GradientReducer::create(std::move(params), communicator_, options.bucket_cap_bytes, "DataParallel");
  threads_ = std::make_unique<ReplicaThreads>(replica_count());
}

DataParallel::~DataParallel() = default;

std::string DataParallel::name() const {
  return "DataParallel(" + replicas_[0]->name() + " over " + device_list_str(devices_) + ")";
}

std::shared_ptr<nn::Module> DataParallel::clone() const {
  throw Error("DataParallel: cannot be cloned; clone the wrapped model (module()->clone()) and wrap the copy");
}

nn::Module& DataParallel::replica(int i) const {
  MINIDL_CHECK(i >= 0 && i < replica_count(), "DataParallel: replica ", i, " is out of range for ", replica_count(),
               " replicas");
  return *replicas_[i];
}

void DataParallel::broadcast_parameters() {
  if (replicas_.size() < 2 || replica_state_[0].empty()) return;
  NoGradGuard no_grad;
  std::vector<DeviceTensors> groups(replica_state_[0].size());
  for (size_t k = 0; k < groups.size(); ++k)
    for (const auto& state : replica_state_) groups[k].push_back(state[k]);
  communicator_->broadcast_grouped(std::move(groups), 0)->wait();
}

Tensor DataParallel::forward(const Tensor& x) {
  check_defined(x, "DataParallel", "x");
  MINIDL_CHECK(x.dim() >= 1 && x.size(0) > 0, "DataParallel: the batch is empty (input of shape ", x.shape(),
               "); it needs at least one row along dim 0 to scatter over the ", replica_count(), " replica(s)");
  broadcast_parameters();
  for (size_t r = 1; r < replicas_.size(); ++r) replicas_[r]->copy_training_flags(*replicas_[0]);

  const std::vector<int64_t> sizes = shard_sizes(x.size(0), replica_count());
  const int used = static_cast<int>(sizes.size());
  reducer_->prepare_for_forward(used);
  const std::vector<Tensor> shards = scatter(x, sizes, devices_);
  std::vector<Tensor> outputs(static_cast<size_t>(used));
  const bool grad_mode = grad_mode_enabled();
  const autocast::State autocast_state = autocast::capture();  // a replica casts as its caller does
  // Note [a replica's random draws]: each replica draws from its own copy of the caller's
  // default generator, and its forward runs on its shard of the batch under a BatchRowsGuard
  // (parallel/batch_shard.h), so a per-row draw (dropout) takes the shard's rows of the whole
  // batch's numbers (Note [random draws of a batch shard] in core/generator.h): the masks are one
  // device's, whatever the number of replicas and the order in which their threads run, and
  // every replica's generator ends in the same state, which the caller's then takes. A draw that
  // is not per row gives every replica the numbers one device would draw once; its generator
  // state is replica 0's. If forward throws, the caller's generator is left as it was. When the
  // caller's forward itself runs on a shard of a larger batch (rows of x in a BatchRowsGuard),
  // the replicas' shards are rows of that larger batch.
  Generator& caller_generator = default_generator();
  std::vector<Generator> generators(static_cast<size_t>(used), caller_generator);
  BatchShard batch = BatchShard::whole(x.size(0));
  if (const BatchRows* outer = current_batch_rows(); outer != nullptr && outer->rows == x.size(0))
    batch = BatchShard{*outer};
  std::vector<BatchShard> replica_shards(static_cast<size_t>(used));
  for (int64_t r = 0, first = batch.begin; r < used; first += sizes[r], ++r)
    replica_shards[r] = BatchShard{{.begin = first, .rows = sizes[r], .total = batch.total}};
  threads_->run(used, [&](int r) {
    GradModeGuard mode(grad_mode);
    const autocast::Scope cast(autocast_state);
    DefaultGeneratorGuard generator(generators[r]);
    BatchRowsGuard rows(replica_shards[r]);
    try {
      outputs[r] = (*replicas_[r])(shards[r]);
    } catch (const Error& e) {
      throw Error(detail::make_message("DataParallel: replica ", r, " on ", devices_[r], " (shard of ", sizes[r],
                                       " rows): ", e.what()));
    }
  });
  caller_generator.set_state(generators[0].state());
  return gather(outputs, devices_[0]);
}

}  // namespace minidl::parallel
