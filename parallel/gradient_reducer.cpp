// GradientReducer: hooks, bucket launches, the end-of-backward callback.
//
// Note [sum over replicas, average over processes]
// DataParallel computes ONE loss, on the gathered output, so the gradient that reaches each
// replica's parameters is already its shard's share of the full-batch gradient (Note [why
// replica gradients are summed] in parallel/data_parallel.cpp): the replicas' gradients are
// summed, never averaged. A process-group backend would run one DataParallel per process,
// each with its own loss, the mean over its own batch; across processes the gradients must
// then be averaged. So the reduced sum is scaled by local_size / world_size — exactly 1 for
// the in-process communicators — and DataParallel needs no change when such a backend comes.
//
// Note [buckets across processes]
// Over a process group every process runs its own backward, and MPI and NCCL match collectives
// by the order in which each process launches them. Within one process the hooks of the
// replicas are ordered by the one thread running backward; across processes they are not, when
// a parameter gets no gradient on some ranks (a branch that one rank's data skips): a bucket could
// complete first on one rank and last on another. So across processes buckets are launched in
// index order: a complete bucket waits until those before it have launched (the index order is
// the order backward produces them, gradient_bucket.h, so little overlap is lost). And whether a
// parameter got a gradient at all must be agreed too — else one rank would step a parameter the
// others leave alone: each flat buffer carries one flag per parameter after the gradients (1 when
// this process produced it), summed with them; a parameter whose flag sum is 0 got no gradient on
// any rank and keeps its .grad, as on one device; the others get the average, zeros included.
#include "parallel/gradient_reducer.h"

#include <algorithm>
#include <chrono>

#include "core/autograd.h"
#include "core/backend.h"

namespace minidl::parallel {

std::shared_ptr<GradientReducer> GradientReducer::create(std::vector<std::vector<Tensor>> replica_params,
                                                         std::shared_ptr<Communicator> communicator,
                                                         size_t bucket_cap_bytes) {
  std::shared_ptr<GradientReducer> reducer(
      new GradientReducer(std::move(replica_params), std::move(communicator), bucket_cap_bytes));
  // Note [one participant]: with a single device in a single process, the all-reduce is the
  // identity and replica 0's gradients are already the result: no hooks, no buffers, no copies,
  // so DataParallel over one device costs what the plain model costs.
  if (reducer->communicator_->world_size() > 1) reducer->register_hooks();
  return reducer;
}

GradientReducer::GradientReducer(std::vector<std::vector<Tensor>> replica_params,
                                 std::shared_ptr<Communicator> communicator, size_t bucket_cap_bytes)
    : params_(std::move(replica_params)), communicator_(std::move(communicator)) {
  MINIDL_CHECK(communicator_ != nullptr, "GradientReducer: got a null communicator");
  const int replicas = communicator_->local_size();
  MINIDL_CHECK(static_cast<int>(params_.size()) == replicas, "GradientReducer: got parameters of ", params_.size(),
               " replica(s) for a communicator over ", device_list_str(communicator_->devices()));
  for (int r = 0; r < replicas; ++r) {
    MINIDL_CHECK(params_[r].size() == params_[0].size(), "GradientReducer: replica ", r, " has ", params_[r].size(),
                 " parameters, replica 0 has ", params_[0].size());
    for (size_t p = 0; p < params_[r].size(); ++p) {
      const Tensor& t = params_[r][p];
      MINIDL_CHECK(t.defined() && t.shape() == params_[0][p].shape() && t.dtype() == params_[0][p].dtype() &&
                       t.device() == communicator_->devices()[r],
                   "GradientReducer: parameter ", p, " of replica ", r, " does not match replica 0's ",
                   params_[0][p].shape(), " ", params_[0][p].dtype(), " on ", communicator_->devices()[r]);
    }
  }
  const int world = communicator_->world_size();
  MINIDL_CHECK(world >= replicas && world % replicas == 0, "GradientReducer: world size ", world,
               " is not a multiple of the ", replicas, " local device(s)");
  gradient_scale_ = static_cast<double>(replicas) / static_cast<double>(world);
  across_processes_ = world > replicas;

  buckets_ = assign_buckets(params_[0], bucket_cap_bytes);
  bucket_of_.assign(params_[0].size(), 0);
  offset_of_.assign(params_[0].size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i = 0; i < buckets_[b].params.size(); ++i) {
      bucket_of_[buckets_[b].params[i]] = b;
      offset_of_[buckets_[b].params[i]] = buckets_[b].offsets[i];
    }
    DeviceTensors flat;
    for (int r = 0; r < replicas && world > 1; ++r)  // Note [one participant]
      flat.push_back(zeros(Shape{buckets_[b].numel + flag_count(b)},
                           TensorOptions(buckets_[b].dtype, communicator_->devices()[r])));
    flat_.push_back(std::move(flat));
  }
  ready_.assign(replicas, std::vector<char>(params_[0].size(), 0));
  pending_.assign(buckets_.size(), 0);
  work_.assign(buckets_.size(), nullptr);
  complete_.assign(buckets_.size(), 0);
}

int64_t GradientReducer::flag_count(size_t b) const {
  return across_processes_ ? static_cast<int64_t>(buckets_[b].params.size()) : 0;
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

void GradientReducer::prepare_for_forward(int replicas_used, bool sync) {
  if (in_backward_) abandon_backward();  // a backward that threw before its end-of-backward callback
  sync_next_ = sync;
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
    MINIDL_CHECK(work_[b] == nullptr, "DataParallel: the gradient of parameter ", param, " of replica ", replica,
                 " arrived after its bucket was all-reduced; was this output made by an earlier forward that used "
                 "more replicas? Run backward on each forward's output before the next forward");
    Tensor slot = flat_[b][replica].narrow(0, offset_of_[param], grad.numel());
    slot.copy_(grad.reshape(Shape{grad.numel()}));
    if (ready_[replica][param]) return;
    ready_[replica][param] = 1;
    if (replica < pass_replicas_ && --pending_[b] == 0) {
      complete_[b] = 1;
      // In one process a bucket launches once complete; across processes in index order too
      // (Note [buckets across processes]).
      if (!across_processes_) {
        launch(b);
        ++sync_.launched_during_backward;
      }
      while (across_processes_ && next_launch_ < buckets_.size() && complete_[next_launch_]) {
        launch(next_launch_++);
        ++sync_.launched_during_backward;
      }
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
  if (across_processes_) {  // the "used" flags (Note [buckets across processes]): one replica per process
    std::vector<double> used(bucket.params.size());
    for (size_t i = 0; i < bucket.params.size(); ++i) used[i] = ready_[0][bucket.params[i]] ? 1.0 : 0.0;
    const auto count = static_cast<int64_t>(used.size());
    flat_[b][0].narrow(0, bucket.numel, count).copy_(from_vector(used, Shape{count}).to(flat_[b][0].dtype()));
  }
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

  std::vector<char> used_anywhere(params_[0].size(), 0);  // Note [buckets across processes]
  for (size_t b = 0; across_processes_ && b < buckets_.size(); ++b) {
    const Tensor flags = flat_[b][0].narrow(0, buckets_[b].numel, flag_count(b)).to(Device::cpu()).to(DType::Float64);
    const std::vector<double> sums = flags.to_vector<double>();
    for (size_t i = 0; i < sums.size(); ++i) used_anywhere[buckets_[b].params[i]] = sums[i] > 0.5;
  }
  Tensor scale;  // gradient_scale_ as a tensor, made once for the parameters that need it
  for (size_t p = 0; p < params_[0].size(); ++p) {
    bool any = used_anywhere[p];
    for (const auto& ready : ready_) any = any || ready[p];
    if (!any) continue;  // no replica used it: its .grad stays as it is, as on one device
    Tensor& param = params_[0][p];
    const Tensor reduced = flat_[bucket_of_[p]][0].narrow(0, offset_of_[p], param.numel()).view(param.shape());
    Tensor grad = param.grad();
    if (!grad.defined()) {
      param.set_grad(gradient_scale_ != 1.0 ? reduced * gradient_scale_ : reduced.clone());
    } else if (gradient_scale_ == 1.0) {
      grad.copy_(reduced);
    } else if (grad.is_contiguous() && grad.dtype() == reduced.dtype() && grad.device() == reduced.device()) {
      // The scaled sum written straight into .grad: one pass over the gradient instead of a
      // product in a new tensor and a copy of it.
      if (!scale.defined() || scale.dtype() != reduced.dtype() || scale.device() != reduced.device())
        scale = scalar_tensor(gradient_scale_, reduced.options());
      backend_for(grad.device()).binary(BinaryOp::Mul, reduced, scale.expand(reduced.shape()), grad);
    } else {  // a .grad the user made strided: the kernels write contiguous outputs
      grad.copy_(reduced * gradient_scale_);
    }
  }
  sync_.buckets = static_cast<int>(buckets_.size());
  last_sync_ = sync_;
  reset_pass_state();
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
  std::fill(complete_.begin(), complete_.end(), 0);
  next_launch_ = 0;
  in_backward_ = false;
  backward_since_forward_ = true;
  sync_ = GradientSyncStats{};
}

}  // namespace minidl::parallel
