// Communicator: collectives (all-reduce, broadcast, barrier) over a fixed list of devices, the
// one interface DataParallel talks to. A backend implements it for one kind of device:
//   CpuCommunicator  (parallel/cpu_communicator.h) — CPU replicas in one process, worker threads;
//   NcclCommunicator (parallel/nccl/nccl_communicator.h) — CUDA devices, one ncclComm per device
//                      (ncclCommInitAll), grouped calls on a communication stream per device
//                      ordered by events against the compute stream;
//   a process group  — one process per GPU, ranks across processes (later; see world_size()).
// Every collective is asynchronous: it returns a CollectiveWork at once, and the tensors must
// not be touched until its wait() returned.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace minidl::parallel {

enum class ReduceOp { Sum, Average };
const char* reduce_op_name(ReduceOp op);

// The handle of one launched collective (or group of collectives).
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  // True once the collective has finished or failed; never blocks (NCCL: polls its events and
  // the communicators' asynchronous errors).
  virtual bool is_completed() = 0;
  // Returns once the results may be used by later work on every participating device, then
  // rethrows the collective's error, if any, as minidl::Error — on every call. The CPU backend
  // blocks until the results are written; a CUDA backend makes each device's compute stream
  // wait for its communication stream and does not block the host.
  virtual void wait() = 0;
};

// One tensor per local device, in the communicator's device order: tensors[i] on devices()[i].
using DeviceTensors = std::vector<Tensor>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual std::string backend_name() const = 0;  // "cpu", "nccl", ...
  // The devices whose tensors this process passes, in rank order. A device may appear more
  // than once only for the CPU (each entry is one CPU replica).
  const std::vector<Device>& devices() const { return devices_; }
  int local_size() const { return static_cast<int>(devices_.size()); }
  // Participants over all processes. In-process backends: local_size(). A process-group
  // backend reports every rank, and the gradient reducer divides its sums by the number of
  // processes (Note [one division, by the number of processes] in parallel/gradient_reducer.cpp).
  virtual int world_size() const { return local_size(); }

  // Grouped collectives: every entry of `groups` is one collective over DeviceTensors, all
  // launched together (NCCL: inside one ncclGroupStart/End) and completed by one work. The
  // results are identical on every device. Tensors are checked before anything is launched.
  virtual std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) = 0;
  // Copies devices()[root]'s tensor of each group into the others.
  virtual std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) = 0;
  // Completes once every collective launched before it on this communicator has completed on
  // every device (and, for a process group, once every rank has reached it).
  virtual std::shared_ptr<CollectiveWork> barrier() = 0;

  // One collective over one tensor per device.
  std::shared_ptr<CollectiveWork> all_reduce(DeviceTensors tensors, ReduceOp op);
  std::shared_ptr<CollectiveWork> broadcast(DeviceTensors tensors, int root);

 protected:
  explicit Communicator(std::vector<Device> devices);
  // The checks every backend runs before launching: at least one group; each group holds one
  // defined, contiguous tensor per device, on that device, all of one shape and dtype.
  void check_groups(const std::vector<DeviceTensors>& groups, const char* op) const;
  void check_root(int root, const char* op) const;

 private:
  std::vector<Device> devices_;
};

// Checks a device list for replicas: not empty, one device type, no CUDA device twice. Throws
// naming `who` and the list.
void check_device_list(const std::vector<Device>& devices, const char* who);
// Checks that every CUDA index in the list is below the device count.
void check_cuda_devices_exist(const std::vector<Device>& devices, const char* who);
// "[cpu, cpu]", "[cuda:0, cuda:1]" for messages.
std::string device_list_str(const std::vector<Device>& devices);

// The communicator for `devices` (checked by both functions above): CpuCommunicator for CPU devices, the
// NCCL communicator for CUDA devices (make_cuda_communicator).
std::shared_ptr<Communicator> make_communicator(const std::vector<Device>& devices);
// The one place a CUDA communicator is created: NCCL's, or a clear error in a build without it.
std::shared_ptr<Communicator> make_cuda_communicator(const std::vector<Device>& devices);
// Whether this build has the NCCL communicator (CMake found NCCL beside the CUDA toolkit).
bool nccl_available();

}  // namespace minidl::parallel
