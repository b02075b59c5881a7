// GradientReducer: all-reduces the replicas' gradients bucket by bucket while backward runs.
// It hooks every parameter of every replica (gradient-ready hooks, core/tensor.h); a hook
// copies the gradient into its bucket's flat buffer on that replica, and the hook that
// completes a bucket on all participating replicas launches the bucket's all-reduce at once,
// so communication overlaps the rest of backward. The first hook of a backward queues an
// end-of-backward callback (autograd::queue_callback) that launches what never completed
// (parameters that got no gradient), waits for every bucket, and writes the reduced gradients
// into replica 0's .grad — so when loss.backward() returns, the wrapped model holds the
// full-batch gradient and optimizer.step() needs nothing else. With one participant in all
// (one device, one process) it does nothing at all: replica 0's gradients are the result.
#pragma once

#include <cstddef>
#include <memory>
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
};

class GradientReducer : public std::enable_shared_from_this<GradientReducer> {
 public:
  // replica_params[r][p]: parameter p of replica r on communicator->devices()[r]; every
  // replica lists the same shapes and dtypes in the same (registration) order. The hooks it
  // registers hold a weak reference: once the reducer is gone they do nothing.
  static std::shared_ptr<GradientReducer> create(std::vector<std::vector<Tensor>> replica_params,
                                                 std::shared_ptr<Communicator> communicator, size_t bucket_cap_bytes);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Called by each forward: replicas 0..count-1 ran it, so their gradients are awaited before
  // a bucket launches (the others contribute zeros). Also clears what a failed backward left.
  // sync = false (DistributedDataParallel::no_sync): the next backward reduces nothing, and the
  // gradients accumulate in .grad as without the reducer, to be reduced by a later backward.
  void prepare_for_forward(int replicas_used, bool sync = true);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  const GradientSyncStats& last_sync() const { return last_sync_; }

 private:
  GradientReducer(std::vector<std::vector<Tensor>> replica_params, std::shared_ptr<Communicator> communicator,
                  size_t bucket_cap_bytes);
  void register_hooks();
  void on_gradient_ready(int replica, size_t param, const Tensor& grad);
  void launch(size_t bucket);
  void finish_backward();
  // Waits for launched all-reduces (ignoring their errors) and forgets the pass's state.
  void abandon_backward() noexcept;
  void reset_pass_state();
  int64_t flag_count(size_t bucket) const;  // "used" flags after the bucket's gradients (0 in one process)

  std::vector<std::vector<Tensor>> params_;  // [replica][param]
  std::shared_ptr<Communicator> communicator_;
  std::vector<GradientBucket> buckets_;
  std::vector<size_t> bucket_of_;           // [param] -> bucket
  std::vector<int64_t> offset_of_;          // [param] -> element offset in its bucket
  std::vector<DeviceTensors> flat_;         // [bucket][replica]: the flat buffers, persistent
  double gradient_scale_ = 1.0;             // Note [sum over replicas, average over processes]
  bool across_processes_ = false;           // Note [buckets across processes]

  // Note [buckets across processes]: launched in index order, each flat buffer followed by one
  // "used" flag per parameter.
  std::vector<char> complete_;  // [bucket]: every awaited gradient arrived, not yet launched
  size_t next_launch_ = 0;      // the lowest bucket not launched yet
  bool sync_next_ = true;

  // State of the backward pass in progress (touched only by the thread running backward).
  bool in_backward_ = false;
  bool backward_since_forward_ = true;
  int expected_replicas_ = 0;  // replicas used by the forwards since the last backward (the most)
  int pass_replicas_ = 1;      // the replicas this backward awaits
  std::vector<std::vector<char>> ready_;           // [replica][param]: its gradient arrived
  std::vector<int> pending_;                       // [bucket]: awaited gradients
  std::vector<std::shared_ptr<CollectiveWork>> work_;  // [bucket]: null until launched
  GradientSyncStats sync_, last_sync_;
};

}  // namespace minidl::parallel
