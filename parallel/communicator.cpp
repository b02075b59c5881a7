// Communicator: the checks shared by every backend, the one-tensor wrappers, and the factory
// that picks the backend from the device list.
#include "parallel/communicator.h"

#include <sstream>

#include "parallel/cpu_communicator.h"
#ifdef MINIDL_WITH_NCCL
#include "parallel/nccl/nccl_communicator.h"
#endif

namespace minidl::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Average:
      return "average";
  }
  return "?";
}

std::string device_list_str(const std::vector<Device>& devices) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < devices.size(); ++i) os << (i ? ", " : "") << devices[i];
  os << "]";
  return os.str();
}

Communicator::Communicator(std::vector<Device> devices) : devices_(std::move(devices)) {
  MINIDL_CHECK(!devices_.empty(), "Communicator: the device list is empty");
}

std::shared_ptr<CollectiveWork> Communicator::all_reduce(DeviceTensors tensors, ReduceOp op) {
  std::vector<DeviceTensors> groups;
  groups.push_back(std::move(tensors));
  return all_reduce_grouped(std::move(groups), op);
}

std::shared_ptr<CollectiveWork> Communicator::broadcast(DeviceTensors tensors, int root) {
  std::vector<DeviceTensors> groups;
  groups.push_back(std::move(tensors));
  return broadcast_grouped(std::move(groups), root);
}

void Communicator::check_groups(const std::vector<DeviceTensors>& groups, const char* op) const {
  const std::string who = backend_name() + " " + op;
  MINIDL_CHECK(!groups.empty(), who, ": got no tensors");
  for (size_t g = 0; g < groups.size(); ++g) {
    const DeviceTensors& tensors = groups[g];
    MINIDL_CHECK(tensors.size() == devices_.size(), who, ": group ", g, " has ", tensors.size(),
                 " tensor(s), expected one per device of ", device_list_str(devices_));
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      MINIDL_CHECK(t.defined(), who, ": tensor ", i, " of group ", g, " is undefined");
      MINIDL_CHECK(t.device() == devices_[i], who, ": tensor ", i, " of group ", g, " is on ", t.device(),
                   ", expected ", devices_[i], " (tensors follow the device order ", device_list_str(devices_), ")");
      MINIDL_CHECK(t.is_contiguous(), who, ": tensor ", i, " of group ", g, " (shape ", t.shape(), ", strides ",
                   t.strides(), ") is not contiguous");
      MINIDL_CHECK(t.shape() == tensors[0].shape() && t.dtype() == tensors[0].dtype(), who, ": tensor ", i,
                   " of group ", g, " is ", t.shape(), " ", t.dtype(), ", tensor 0 is ", tensors[0].shape(), " ",
                   tensors[0].dtype(), "; every device must pass the same shape and dtype");
    }
  }
}

void Communicator::check_root(int root, const char* op) const {
  MINIDL_CHECK(root >= 0 && root < local_size(), backend_name(), " ", op, ": root ", root, " is out of range for ",
               local_size(), " device(s) ", device_list_str(devices_));
}

void check_device_list(const std::vector<Device>& devices, const char* who) {
  MINIDL_CHECK(!devices.empty(), who, ": the device list is empty; pass the devices to replicate over (every CUDA "
               "device, or parallel::cpu_replicas(n) for n CPU replicas)");
  for (const Device& d : devices)
    MINIDL_CHECK(d.type == devices[0].type, who, ": the device list ", device_list_str(devices),
                 " mixes CPU and CUDA devices; replicas must be all CPU or all CUDA");
  if (!devices[0].is_cuda()) return;
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      MINIDL_CHECK(devices[i] != devices[j], who, ": ", devices[i], " is listed twice in ", device_list_str(devices),
                   " (entries ", j, " and ", i, "); a CUDA device holds one replica");
}

void check_cuda_devices_exist(const std::vector<Device>& devices, const char* who) {
  const int count = cuda_device_count();
  for (const Device& d : devices)
    MINIDL_CHECK(!d.is_cuda() || d.index < count, who, ": ", d, " in ", device_list_str(devices), " is beyond the device count (",
                 count, " CUDA device(s) visible", count == 0 ? "; this build or machine has no usable GPU" : "", ")");
}

std::shared_ptr<Communicator> make_communicator(const std::vector<Device>& devices) {
  check_device_list(devices, "make_communicator");
  check_cuda_devices_exist(devices, "make_communicator");
  if (devices[0].is_cpu()) return std::make_shared<CpuCommunicator>(devices);
  return make_cuda_communicator(devices);
}

bool nccl_available() {
#ifdef MINIDL_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> make_cuda_communicator(const std::vector<Device>& devices) {
#ifdef MINIDL_WITH_NCCL
  return make_nccl_communicator(devices);
#else
  throw Error("make_communicator: this build of minidl has no NCCL communicator (configure found no NCCL: "
              "set NCCL_ROOT, or MINIDL_NCCL=ON to require it), so data parallel over the CUDA devices " +
              device_list_str(devices) + " is not available; CPU replicas (parallel::cpu_replicas(n)) are");
#endif
}

}  // namespace minidl::parallel
