// ProcessGroup: the checks every backend shares, the allocating all-gather, the launcher
// detection, the device of a process, abort_job, and the factories' clear errors in a build
// without MPI or NCCL.
#include "parallel/process_group.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#ifdef MINIDL_WITH_MPI
#include "parallel/mpi/mpi_runtime.h"
#endif

namespace minidl::parallel {

ProcessGroup::ProcessGroup(Device device, int rank, int world_size, int local_rank, int local_world_size)
    : Communicator({device}), rank_(rank), world_size_(world_size), local_rank_(local_rank),
      local_world_size_(local_world_size) {
  MINIDL_CHECK(world_size >= 1 && rank >= 0 && rank < world_size && local_rank >= 0 &&
                   local_rank < local_world_size && local_world_size <= world_size,
               "ProcessGroup: inconsistent ranks (rank ", rank, " of ", world_size, ", local rank ", local_rank, " of ",
               local_world_size, ")");
}

void ProcessGroup::check_root_rank(int root, const char* op) const {
  MINIDL_CHECK(root >= 0 && root < world_size(), backend_name(), " process group ", op, ": root rank ", root,
               " is out of range for ", world_size(), " rank(s)");
}

void ProcessGroup::check_all_gather(const Tensor& input, const Tensor& output) const {
  check_groups({{input}}, "all_gather");
  check_groups({{output}}, "all_gather");
  Shape expected = input.shape();
  expected.insert(0, static_cast<int64_t>(world_size()));
  MINIDL_CHECK(output.shape() == expected && output.dtype() == input.dtype(), backend_name(),
               " process group all_gather: the output must be ", expected, " ", input.dtype(), " (world size ",
               world_size(), " times the input ", input.shape(), "), got ", output.shape(), " ", output.dtype());
}

Tensor ProcessGroup::all_gather(const Tensor& input) {
  check_groups({{input}}, "all_gather");
  Shape shape = input.shape();
  shape.insert(0, static_cast<int64_t>(world_size()));
  Tensor output = empty(shape, TensorOptions(input.dtype(), device()));
  all_gather(input, output)->wait();
  return output;
}

bool mpi_available() {
#ifdef MINIDL_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool launched_with_several_processes() {
  // Open MPI, MPICH/Hydra (PMI), PMIx launchers, and Slurm's srun (SLURM_STEP_NUM_TASKS: a job
  // step's task count, which srun sets; SLURM_NTASKS is also set in a plain sbatch script).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && std::atoi(value) > 1) return true;
  }
  return false;
}

Device process_device(const ProcessGroup& group) {
  const int count = cuda_device_count();
  if (count == 0) return Device::cpu();
  MINIDL_CHECK(group.local_rank() < count, "process_device: rank ", group.rank(), " is local rank ",
               group.local_rank(), " of ", group.local_world_size(), " on its machine, which has only ", count,
               " CUDA device(s); start at most one process per GPU on each machine");
  return Device::cuda(group.local_rank());
}

std::shared_ptr<ProcessGroup> make_process_group() {
  std::shared_ptr<ProcessGroup> cpu = make_mpi_process_group();
  const Device device = process_device(*cpu);
  if (device.is_cpu()) return cpu;
  return make_nccl_process_group(device);
}

#ifndef MINIDL_WITH_MPI
std::shared_ptr<ProcessGroup> make_mpi_process_group() {
  throw Error(std::string("make_mpi_process_group: this build of minidl has no MPI process group (configure found no "
                          "MPI: apt-get install libopenmpi-dev, or MINIDL_MPI=ON to require it)") +
              (launched_with_several_processes()
                   ? "; this process was started by an MPI launcher with several processes, which would each train "
                     "alone"
                   : ""));
}
#endif

#if !defined(MINIDL_WITH_MPI) || !defined(MINIDL_WITH_NCCL)
std::shared_ptr<ProcessGroup> make_nccl_process_group(Device device) {
  throw Error("make_nccl_process_group: this build of minidl has no NCCL process group (it needs both MPI and NCCL; "
              "MPI " + std::string(mpi_available() ? "found" : "not found") + ", NCCL " +
              (nccl_available() ? "found" : "not found") + "), so CUDA tensors on " + device.str() +
              " cannot be reduced across processes");
}
#endif

void abort_job(int exit_code, const std::string& why) noexcept {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::fflush(stderr);
#ifdef MINIDL_WITH_MPI
  if (mpi::active()) MPI_Abort(MPI_COMM_WORLD, exit_code);  // Note [a failed rank]
#endif
  std::_Exit(exit_code);
}

}  // namespace minidl::parallel
