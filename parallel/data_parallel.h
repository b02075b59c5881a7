// parallel::DataParallel: trains one model on several devices as if it were one device.
// The training loop stays the tutorial's, apart from the wrapping line:
//
//   auto dp = std::make_shared<parallel::DataParallel>(model, devices);   // model = DataParallel(model)
//   optim::SGD optimizer(dp->parameters(), ...);   // = the model's parameters (replica 0)
//   optimizer.zero_grad(); Tensor out = (*dp)(x); Tensor loss = criterion(out, y);
//   loss.backward(); optimizer.step();
//
// Replica 0 IS the wrapped model; replicas 1..n-1 are clones made once at construction
// (Module::clone) and kept. Each forward broadcasts replica 0's parameters and buffers to
// the others (Note [re-broadcast, not same-update] in data_parallel.cpp), scatters the batch
// along dim 0 (shards differ by at most one row; a batch smaller than the replica count uses
// fewer replicas), runs the replicas concurrently, one thread each, and gathers the outputs
// on the first device. Backward reaches every replica through the gather; their gradients
// are summed in buckets while backward runs (GradientReducer), and when loss.backward()
// returns replica 0 holds the full-batch gradient.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/communicator.h"
#include "parallel/gradient_reducer.h"

namespace minidl::parallel {

class ReplicaThreads;

struct DataParallelOptions {
  // Gradients are all-reduced in buckets of at most this many bytes (PyTorch DDP's default);
  // a parameter larger than the cap gets a bucket of its own.
  size_t bucket_cap_bytes = 25 * 1024 * 1024;
  // The communicator over exactly the devices given; null: make_communicator(devices).
  std::shared_ptr<Communicator> communicator = nullptr;
};

// n CPU replicas: {cpu, cpu, ...}. The CPU is the one device that may be listed more than
// once (each entry is one replica, in host memory, run by its own thread).
std::vector<Device> cpu_replicas(int n);
// cuda:0 .. cuda:(count-1); empty without a GPU.
std::vector<Device> all_cuda_devices();

class DataParallel : public nn::Module {
 public:
  // Over every CUDA device (a clear error when there is none: pass cpu_replicas(n) then).
  explicit DataParallel(std::shared_ptr<nn::Module> model, DataParallelOptions options = {});
  // Over `devices`; the model must already be on devices[0] and implement clone(). Errors:
  // an empty list, CPU and CUDA mixed, a CUDA device listed twice, the model elsewhere than
  // on devices[0], a CUDA index beyond the device count.
  DataParallel(std::shared_ptr<nn::Module> model, std::vector<Device> devices, DataParallelOptions options = {});
  ~DataParallel() override;

  // x [B, ...] with B > 0, on any device; returns the replicas' outputs concatenated on
  // devices()[0]. Runs under the caller's grad mode on every replica thread.
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  std::shared_ptr<nn::Module> clone() const override;  // throws: wrap a clone of the model instead

  const std::vector<Device>& devices() const { return devices_; }
  int replica_count() const { return static_cast<int>(replicas_.size()); }
  // Replica i (0 is the wrapped model).
  nn::Module& replica(int i) const;
  const std::shared_ptr<nn::Module>& module() const { return replicas_[0]; }
  Communicator& communicator() const { return *communicator_; }
  const std::vector<GradientBucket>& buckets() const { return reducer_->buckets(); }
  // What the last backward's gradient synchronisation did (buckets, launches, wait time).
  const GradientSyncStats& last_gradient_sync() const { return reducer_->last_sync(); }

  // Copies replica 0's parameters and buffers into every other replica (forward does it first).
  void broadcast_parameters();

 private:
  std::vector<Device> devices_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::vector<std::vector<Tensor>> replica_state_;  // [replica]: parameters, then buffers
  std::shared_ptr<Communicator> communicator_;
  std::shared_ptr<GradientReducer> reducer_;
  std::unique_ptr<ReplicaThreads> threads_;
};

}  // namespace minidl::parallel
