// GradientReducer: hooks, bucket launches, the end-of-backward callback.
//
// Note [one division, by the number of processes]
// The gradient a wrapper must leave in .grad is the global batch's: the gradient of the mean
// loss over all its rows.
//   DataParallel computes ONE loss, on the gathered output, so the gradient that reaches each
//   replica is already its shard's share of the full-batch gradient (Note [why replica gradients
//   are summed] in parallel/data_parallel.cpp): the replicas' gradients are summed.
//   DistributedDataParallel runs one loss per process, the mean over that process's rows, so
//   the P processes' gradients are averaged: summed, then divided by P.
// The reducer does both with one rule: every bucket is all-reduced with ReduceOp::Sum over every
// participant (replicas and processes), and the sum is divided by processes() = world size /
// local devices — 1 in one process — when it is written into .grad. This is the only place a
// gradient is averaged; the process groups' ReduceOp::Average is a collective for programs
// (a loss to display, a metric), never used here.
//
// Note [a shard's gradient weight]
// The average over processes is the global batch's gradient when every process's loss is the
// mean over the same number of rows. A batch of n rows split over P processes gives rank r
// rows_r rows, and the global mean loss is Σ_r (rows_r / n) · loss_r, so rank r's gradient must
// enter the average with weight w_r = rows_r · P / n (1 when the rows split evenly):
// Σ_r w_r · g_r / P = Σ_r (rows_r / n) · g_r. DistributedDataParallel sets w_r per step from
// the shard it trains on (prepare_for_forward), and the hook multiplies the gradient by it as it
// copies it into the bucket — in the copy it makes anyway, so an even split costs nothing.
//
// Note [launch order across processes]
// MPI and NCCL match collectives by the order in which each process launches them. Within one
// process the hooks of every replica are ordered by the one thread running backward; across
// processes they are not when a parameter gets no gradient on some ranks (a branch one rank's
// data skips): a bucket could complete first on one rank and last on another. So across
// processes buckets are launched in index order (BucketLaunchOrder::InIndexOrder): a complete
// bucket waits until those before it have launched. The index order is the order backward
// produces them (gradient_bucket.h), so little overlap is lost.
//
// Note [which parameters got a gradient]
// On one device, a parameter that backward never reached keeps its .grad (undefined after
// zero_grad), and the optimizer skips it. Across processes every rank must make the same
// choice, or one rank would step a parameter the others leave alone. So each flat buffer
// carries one flag per parameter after the gradients (UsedFlags: 1 when this process produced
// the gradient), summed with them. A parameter this process used gets the reduced gradient
// without looking at the flags. Only for a parameter this process did NOT use must the flags be
// read on the host — its .grad is set or left as it is, a decision the host makes — and that
// read is a copy to the host, which on a CUDA device waits for the all-reduce (a host sync).
// So the common step, where every rank uses every parameter, reads nothing and never waits on
// the host; a step in which this rank skipped a parameter reads the flags of that parameter's
// buckets (GradientSyncStats::read_used_flags says it happened). The flags are still carried
// on every step: a rank cannot know in advance whether another will need them.
#include "parallel/gradient_reducer.h"

#include <algorithm>
#include <chrono>

#include "core/autograd.h"
#include "core/backend.h"

namespace minidl::parallel {

void UsedFlags::write(const GradientBucket& bucket, const Tensor& flat, const std::vector<char>& used) const {
  if (!carried_) return;
  std::vector<double> flags(bucket.params.size());
  for (size_t i = 0; i < bucket.params.size(); ++i) flags[i] = used[bucket.params[i]] ? 1.0 : 0.0;
  const auto n = static_cast<int64_t>(flags.size());
  flat.narrow(0, bucket.numel, n).copy_(from_vector(flags, Shape{n}).to(flat.dtype()));
}

void UsedFlags::read(const GradientBucket& bucket, const Tensor& flat, std::vector<char>& used_anywhere) const {
  const auto n = static_cast<int64_t>(bucket.params.size());
  const std::vector<double> sums = flat.narrow(0, bucket.numel, n).to(Device::cpu()).to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < sums.size(); ++i) used_anywhere[bucket.params[i]] = sums[i] > 0.5;
}

std::shared_ptr<GradientReducer> GradientReducer::create(std::vector<std::vector<Tensor>> replica_params,
                                                         std::shared_ptr<Communicator> communicator,
                                                         size_t bucket_cap_bytes, std::string owner) {
  std::shared_ptr<GradientReducer> reducer(
      new GradientReducer(std::move(replica_params), std::move(communicator), bucket_cap_bytes, std::move(owner)));
  // Note [one participant]: with a single device in a single process, the all-reduce is the
  // identity and replica 0's gradients are already the result: no hooks, no buffers, no copies,
  // so a wrapper over one device costs what the plain model costs.
  if (reducer->communicator_->world_size() > 1) reducer->register_hooks();
  return reducer;
}

namespace {
// Several processes: launch in index order and carry "used" flags (the two Notes above).
bool across_processes(const Communicator& c) { return c.world_size() > c.local_size(); }
}  // namespace

GradientReducer::GradientReducer(std::vector<std::vector<Tensor>> replica_params,
                                 std::shared_ptr<Communicator> communicator, size_t bucket_cap_bytes,
                                 std::string owner)
    : owner_(std::move(owner)),
      params_(std::move(replica_params)),
      communicator_(std::move(communicator)),
      launch_order_(0, BucketLaunchOrder::Rule::AsCompleted),
      used_flags_(false) {
  MINIDL_CHECK(communicator_ != nullptr, owner_, ": the gradient reducer got a null communicator");
  const int replicas = communicator_->local_size();
  MINIDL_CHECK(static_cast<int>(params_.size()) == replicas, owner_, ": got parameters of ", params_.size(),
               " replica(s) for a communicator over ", device_list_str(communicator_->devices()));
  for (int r = 0; r < replicas; ++r) {
    MINIDL_CHECK(params_[r].size() == params_[0].size(), owner_, ": replica ", r, " has ", params_[r].size(),
                 " parameters, replica 0 has ", params_[0].size());
    for (size_t p = 0; p < params_[r].size(); ++p) {
      const Tensor& t = params_[r][p];
      MINIDL_CHECK(t.defined() && t.shape() == params_[0][p].shape() && t.dtype() == params_[0][p].dtype() &&
                       t.device() == communicator_->devices()[r],
                   owner_, ": parameter ", p, " of replica ", r, " does not match replica 0's ",
                   params_[0][p].shape(), " ", params_[0][p].dtype(), " on ", communicator_->devices()[r]);
    }
  }
  const int world = communicator_->world_size();
  MINIDL_CHECK(world >= replicas && world % replicas == 0, owner_, ": world size ", world,
               " is not a multiple of the ", replicas, " local device(s)");
  processes_ = world / replicas;

  buckets_ = assign_buckets(params_[0], bucket_cap_bytes);
  const bool several = across_processes(*communicator_);
  launch_order_ = BucketLaunchOrder(buckets_.size(), several ? BucketLaunchOrder::Rule::InIndexOrder
                                                             : BucketLaunchOrder::Rule::AsCompleted);
  used_flags_ = UsedFlags(several);
  bucket_of_.assign(params_[0].size(), 0);
  offset_of_.assign(params_[0].size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i = 0; i < buckets_[b].params.size(); ++i) {
      bucket_of_[buckets_[b].params[i]] = b;
      offset_of_[buckets_[b].params[i]] = buckets_[b].offsets[i];
    }
    DeviceTensors flat;
    for (int r = 0; r < replicas && world > 1; ++r)  // Note [one participant]
      flat.push_back(zeros(Shape{buckets_[b].numel + used_flags_.count(buckets_[b])},
                           TensorOptions(buckets_[b].dtype, communicator_->devices()[r])));
    flat_.push_back(std::move(flat));
  }
  ready_.assign(replicas, std::vector<char>(params_[0].size(), 0));
  pending_.assign(buckets_.size(), 0);
  work_.assign(buckets_.size(), nullptr);
}

GradientReducer::~GradientReducer() { abandon_backward(); }

void GradientReducer::register_hooks() {
  std::weak_ptr<GradientReducer> weak = weak_from_this();
  for (size_t r = 0; r < params_.size(); ++r)
    for (size_t p = 0; p < params_[r].size(); ++p)
      params_[r][p].register_hook([weak, r, p](const Tensor& grad) {
        if (std::shared_ptr<GradientReducer> self = weak.lock()) self->on_gradient_ready(static_cast<int>(r), p, grad);
      });
}

void GradientReducer::prepare_for_forward(int replicas_used, bool sync, double gradient_weight, int64_t batch_rows) {
  if (in_backward_) abandon_backward();  // a backward that threw before its end-of-backward callback
  if (!grad_mode_enabled()) return;      // an evaluation forward: no backward will reduce it
  // Keyed on batch_rows, the same on every process, so that every process throws or none does.
  MINIDL_CHECK(backward_since_forward_ || (batch_rows == batch_rows_ && gradient_weight == gradient_weight_), owner_,
               ": the forwards whose gradients one backward reduces (under no_sync, or several forwards before one "
               "backward) trained on shards that split differently (batches of ", batch_rows_, " and ", batch_rows,
               " rows, gradient weights ", gradient_weight_, " and ", gradient_weight,
               "); accumulate over batches of one size, or reduce after each");
  sync_next_ = sync;
  gradient_weight_ = gradient_weight;
  batch_rows_ = batch_rows;
  expected_replicas_ = backward_since_forward_ ? replicas_used : std::max(expected_replicas_, replicas_used);
  backward_since_forward_ = false;
}

void GradientReducer::on_gradient_ready(int replica, size_t param, const Tensor& grad) {
  if (!in_backward_ && !sync_next_) return;  // no_sync: .grad accumulates as without the reducer
  try {
    if (!in_backward_) {
      in_backward_ = true;
      pass_replicas_ = std::clamp(expected_replicas_, 1, communicator_->local_size());
      for (size_t b = 0; b < buckets_.size(); ++b)
        pending_[b] = static_cast<int>(buckets_[b].params.size()) * pass_replicas_;
      std::weak_ptr<GradientReducer> weak = weak_from_this();
      autograd::queue_callback([weak] {
        if (std::shared_ptr<GradientReducer> self = weak.lock()) self->finish_backward();
      });
    }
    const size_t b = bucket_of_[param];
    MINIDL_CHECK(work_[b] == nullptr, owner_, ": the gradient of parameter ", param, " of replica ", replica,
                 " arrived after its bucket was all-reduced; was this output made by an earlier forward that used "
                 "more replicas? Run backward on each forward's output before the next forward");
    Tensor slot = flat_[b][replica].narrow(0, offset_of_[param], grad.numel());
    const Tensor flat_grad = grad.reshape(Shape{grad.numel()});
    slot.copy_(gradient_weight_ == 1.0 ? flat_grad : flat_grad * gradient_weight_);  // Note [a shard's gradient weight]
    if (ready_[replica][param]) return;
    ready_[replica][param] = 1;
    if (replica < pass_replicas_ && --pending_[b] == 0) {
      launch_order_.complete(b, [this](size_t launch_now) {
        launch(launch_now);
        ++sync_.launched_during_backward;
      });
    }
  } catch (...) {
    abandon_backward();  // backward stops here; its queued callback is dropped with it
    throw;
  }
}

void GradientReducer::launch(size_t b) {
  const GradientBucket& bucket = buckets_[b];
  for (size_t r = 0; r < flat_[b].size(); ++r) {  // a replica that produced no gradient contributes zeros
    const bool none = std::none_of(bucket.params.begin(), bucket.params.end(), [&](size_t p) { return ready_[r][p]; });
    if (none) {
      flat_[b][r].zero_();
      continue;
    }
    for (size_t i = 0; i < bucket.params.size(); ++i)
      if (!ready_[r][bucket.params[i]])
        flat_[b][r].narrow(0, bucket.offsets[i], params_[r][bucket.params[i]].numel()).zero_();
  }
  used_flags_.write(bucket, flat_[b][0], ready_[0]);  // one replica per process when carried
  work_[b] = communicator_->all_reduce(flat_[b], ReduceOp::Sum);
}

void GradientReducer::finish_backward() {
  std::exception_ptr error;
  try {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (work_[b]) continue;
      launch(b);
      ++sync_.launched_at_end;
    }
  } catch (...) {
    error = std::current_exception();
  }
  const auto start = std::chrono::steady_clock::now();
  for (const auto& w : work_) {  // wait for every launched bucket, even after a failure
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  sync_.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (error) {
    abandon_backward();
    std::rethrow_exception(error);
  }
  write_gradients();
  sync_.buckets = static_cast<int>(buckets_.size());
  last_sync_ = sync_;
  reset_pass_state();
}

void GradientReducer::write_gradients() {
  // Note [which parameters got a gradient]: used[p] is known locally for what a local replica
  // used; the flags of a bucket are read (once) only for a parameter no local replica used.
  std::vector<char> used(params_[0].size(), 0), flags_read(buckets_.size(), 0);
  for (size_t p = 0; p < params_[0].size(); ++p)
    for (const auto& ready : ready_) used[p] = used[p] || ready[p];
  for (size_t p = 0; p < params_[0].size(); ++p) {
    const size_t b = bucket_of_[p];
    if (!used[p] && used_flags_.carried() && !flags_read[b]) {
      used_flags_.read(buckets_[b], flat_[b][0], used);
      flags_read[b] = 1;
      sync_.read_used_flags = true;
    }
  }
  const double scale = 1.0 / static_cast<double>(processes_);  // Note [one division, by the number of processes]
  Tensor scale_tensor;  // `scale` as a tensor, made once for the parameters that need it
  for (size_t p = 0; p < params_[0].size(); ++p) {
    if (!used[p]) continue;  // no replica of any process used it: its .grad stays, as on one device
    Tensor& param = params_[0][p];
    const Tensor reduced = flat_[bucket_of_[p]][0].narrow(0, offset_of_[p], param.numel()).view(param.shape());
    Tensor grad = param.grad();
    if (!grad.defined()) {
      param.set_grad(scale != 1.0 ? reduced * scale : reduced.clone());
    } else if (scale == 1.0) {
      grad.copy_(reduced);
    } else if (grad.is_contiguous() && grad.dtype() == reduced.dtype() && grad.device() == reduced.device()) {
      // The scaled sum written straight into .grad: one pass over the gradient instead of a
      // product in a new tensor and a copy of it.
      if (!scale_tensor.defined() || scale_tensor.dtype() != reduced.dtype() || scale_tensor.device() != reduced.device())
        scale_tensor = scalar_tensor(scale, reduced.options());
      backend_for(grad.device()).binary(BinaryOp::Mul, reduced, scale_tensor.expand(reduced.shape()), grad);
    } else {  // a .grad the user made strided: the kernels write contiguous outputs
      grad.copy_(reduced * scale);
    }
  }
}

void GradientReducer::abandon_backward() noexcept {
  for (const auto& w : work_) {
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {  // the failure was (or will be) reported by the pass that launched it
    }
  }
  reset_pass_state();
}

void GradientReducer::reset_pass_state() {
  // Replicas other than 0 hold scratch gradients; dropping them frees the memory and lets the
  // next backward store its gradients without accumulating into stale ones.
  for (size_t r = 1; r < params_.size(); ++r)
    for (Tensor& p : params_[r]) p.set_grad(Tensor());
  for (auto& ready : ready_) std::fill(ready.begin(), ready.end(), 0);
  std::fill(work_.begin(), work_.end(), nullptr);
  launch_order_.reset();
  in_backward_ = false;
  backward_since_forward_ = true;
  sync_ = GradientSyncStats{};
}

}  // namespace minidl::parallel
