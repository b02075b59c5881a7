// GradientReducer: all-reduces the gradients of a data-parallel model bucket by bucket while
// backward runs — for DataParallel (replicas in this process) and DistributedDataParallel (one
// process per device) alike. It hooks every parameter of every local replica (gradient-ready
// hooks, core/tensor.h); a hook copies the gradient, times this step's weight (Note [a shard's
// gradient weight] in gradient_reducer.cpp), into its bucket's flat buffer, and once a bucket
// holds every local replica's gradients it is launched (BucketLaunchOrder says when), so
// communication overlaps the rest of backward. The first hook of a backward queues an
// end-of-backward callback (autograd::queue_callback) that launches what never completed
// (parameters that got no gradient), waits for every bucket, and writes the reduced gradients,
// divided by the number of processes, into replica 0's .grad — so when loss.backward() returns
// the wrapped model holds the global batch's gradient and optimizer.step() needs nothing else.
// With one participant in all (one device, one process) it does nothing at all: replica 0's
// gradients are the result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/gradient_bucket.h"

namespace minidl::parallel {

// What the last backward did (for tests and bench/data_parallel).
struct GradientSyncStats {
  int buckets = 0;                   // buckets all-reduced
  int launched_during_backward = 0;  // by a gradient-ready hook, overlapping the rest of backward
  int launched_at_end = 0;           // by the end-of-backward callback
  double wait_seconds = 0;           // the callback's wait for outstanding all-reduces (not overlapped)
  bool read_used_flags = false;      // the callback copied the "used" flags to the host (Note [which parameters got a gradient])
};

// When a complete bucket is launched. Within one process the one thread running backward
// orders every replica's hooks, so a bucket launches as soon as it completes (AsCompleted).
// Across processes the launch order must be the same on every rank (Note [launch order across
// processes] in gradient_reducer.cpp), so a complete bucket waits for those before it
// (InIndexOrder).
class BucketLaunchOrder {
 public:
  enum class Rule { AsCompleted, InIndexOrder };
  BucketLaunchOrder(size_t buckets, Rule rule) : rule_(rule), complete_(buckets, 0) {}
  // Bucket b is complete: calls launch(i) for every bucket to launch now, in order.
  template <typename Launch>
  void complete(size_t b, Launch&& launch) {
    if (rule_ == Rule::AsCompleted) return launch(b);
    complete_[b] = 1;
    while (next_ < complete_.size() && complete_[next_]) launch(next_++);
  }
  void reset() {
    std::fill(complete_.begin(), complete_.end(), 0);
    next_ = 0;
  }

 private:
  Rule rule_;
  std::vector<char> complete_;  // [bucket]: complete, not launched yet (InIndexOrder)
  size_t next_ = 0;             // the lowest bucket not launched yet (InIndexOrder)
};

// Across processes, one flag per parameter after each bucket's gradients: 1 where this process
// produced the gradient, summed with them, so that every rank knows which parameters got a
// gradient on some rank (Note [which parameters got a gradient] in gradient_reducer.cpp).
// Within one process the reducer sees every replica's hooks and carries no flags.
class UsedFlags {
 public:
  explicit UsedFlags(bool carried) : carried_(carried) {}
  bool carried() const { return carried_; }
  // Flags after the bucket's gradients in its flat buffer (0 when not carried).
  int64_t count(const GradientBucket& bucket) const {
    return carried_ ? static_cast<int64_t>(bucket.params.size()) : 0;
  }
  // Writes this process's flags (used[p]: parameter p got a gradient here) into `flat`.
  void write(const GradientBucket& bucket, const Tensor& flat, const std::vector<char>& used) const;
  // The reduced flags of `flat`, read on the host: used_anywhere[p] for the bucket's parameters.
  void read(const GradientBucket& bucket, const Tensor& flat, std::vector<char>& used_anywhere) const;

 private:
  bool carried_;
};

class GradientReducer : public std::enable_shared_from_this<GradientReducer> {
 public:
  // replica_params[r][p]: parameter p of replica r on communicator->devices()[r]; every
  // replica lists the same shapes and dtypes in the same (registration) order. `owner` names
  // the wrapper in errors ("DataParallel", "DistributedDataParallel"). The hooks it registers
  // hold a weak reference: once the reducer is gone they do nothing.
  static std::shared_ptr<GradientReducer> create(std::vector<std::vector<Tensor>> replica_params,
                                                 std::shared_ptr<Communicator> communicator, size_t bucket_cap_bytes,
                                                 std::string owner);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Called by each forward. Replicas 0..replicas_used-1 ran it, so their gradients are awaited
  // before a bucket launches (the others contribute zeros). `gradient_weight` multiplies this
  // process's gradients before they are summed (Note [a shard's gradient weight]; 1 unless the
  // process trained on a shard of uneven size). sync = false (DistributedDataParallel::no_sync):
  // the next backward reduces nothing, and the gradients accumulate in .grad as without the
  // reducer, to be reduced by a later backward; every forward whose gradients one backward
  // reduces must then come from batches of the same `batch_rows` (0: not sharded) and have the
  // same weight. The check keys on the batch size, which every process shares, so all of them
  // throw together or none does. A forward without grad mode (evaluation) changes nothing but
  // clearing what a failed backward left, which every call does.
  void prepare_for_forward(int replicas_used, bool sync = true, double gradient_weight = 1.0, int64_t batch_rows = 0);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  const GradientSyncStats& last_sync() const { return last_sync_; }
  // The number of processes the summed gradients are divided by (world size / local devices).
  int processes() const { return processes_; }

 private:
  GradientReducer(std::vector<std::vector<Tensor>> replica_params, std::shared_ptr<Communicator> communicator,
                  size_t bucket_cap_bytes, std::string owner);
  void register_hooks();
  void on_gradient_ready(int replica, size_t param, const Tensor& grad);
  void launch(size_t bucket);
  void finish_backward();
  void write_gradients();
  // Waits for launched all-reduces (ignoring their errors) and forgets the pass's state.
  void abandon_backward() noexcept;
  void reset_pass_state();

  std::string owner_;
  std::vector<std::vector<Tensor>> params_;  // [replica][param]
  std::shared_ptr<Communicator> communicator_;
  std::vector<GradientBucket> buckets_;
  std::vector<size_t> bucket_of_;   // [param] -> bucket
  std::vector<int64_t> offset_of_;  // [param] -> element offset in its bucket
  std::vector<DeviceTensors> flat_;  // [bucket][replica]: the flat buffers, persistent
  int processes_ = 1;                // Note [one division, by the number of processes]
  BucketLaunchOrder launch_order_;
  UsedFlags used_flags_;
  bool sync_next_ = true;
  double gradient_weight_ = 1.0;  // this step's, set by prepare_for_forward
  int64_t batch_rows_ = 0;        // the rows of the batch it is a shard of (0: not sharded)

  // State of the backward pass in progress (touched only by the thread running backward).
  bool in_backward_ = false;
  bool backward_since_forward_ = true;
  int expected_replicas_ = 0;  // replicas used by the forwards since the last backward (the most)
  int pass_replicas_ = 1;      // the replicas this backward awaits
  std::vector<std::vector<char>> ready_;               // [replica][param]: its gradient arrived
  std::vector<int> pending_;                           // [bucket]: awaited gradients
  std::vector<std::shared_ptr<CollectiveWork>> work_;  // [bucket]: null until launched
  GradientSyncStats sync_, last_sync_;
};

}  // namespace minidl::parallel
