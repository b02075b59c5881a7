// ProcessGroup: the Communicator of one process among several — one process per device, on
// one machine or many, started by an MPI launcher (mpirun/mpiexec, Slurm's srun). Each
// process is a rank 0..world_size()-1 and passes ONE tensor, on its device(), to each
// collective; the collective runs over every rank. Two backends:
//   MpiProcessGroup  (parallel/mpi) — CPU tensors (float32, float64, int64), through MPI;
//   NcclProcessGroup (parallel/nccl/nccl_process_group) — CUDA tensors on cuda:<local rank>,
//                    through NCCL (ncclCommInitRank; its unique id is broadcast over MPI).
// As a Communicator it has one local device and world_size() participants, so the
// GradientReducer of DataParallel serves it unchanged: DistributedDataParallel averages
// gradients over processes with the same buckets and hooks.
//
// Every rank must call the same collectives in the same order with tensors of the same shape
// and dtype (MPI's and NCCL's rule). `root` is a rank here, not a device index.
//
// Note [a failed rank]: a process that dies (killed, crashed, an uncaught exception) is noticed
// by the launcher, which ends the whole job and names the rank (Open MPI: "mpirun noticed that
// process rank 1 ... exited on signal 9"); the others do not wait forever in a collective. A
// program that catches an error while other ranks may be inside a collective must end the job
// itself: abort_job() (MPI_Abort) does, with a non-zero exit status, on every rank. Only a
// program's main() calls it; the library never ends the process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace minidl::parallel {

class ProcessGroup : public Communicator {
 public:
  int rank() const { return rank_; }
  int world_size() const override { return world_size_; }
  // The rank among the processes on this machine (MPI's shared-memory split), and their count:
  // a process uses cuda:<local_rank()> when the machine has CUDA devices.
  int local_rank() const { return local_rank_; }
  int local_world_size() const { return local_world_size_; }
  // The device whose tensors this process passes (devices()[0]).
  Device device() const { return devices()[0]; }

  // output [world_size, ...input.shape]: output[r] is rank r's input. Both on device(), of
  // one dtype, contiguous; every rank passes the same input shape.
  virtual std::shared_ptr<CollectiveWork> all_gather(const Tensor& input, const Tensor& output) = 0;

  // One-tensor collectives that wait: the loop's and the samplers' everyday calls.
  void all_reduce_(Tensor& t, ReduceOp op) { all_reduce({t}, op)->wait(); }
  void broadcast_(Tensor& t, int root) { broadcast({t}, root)->wait(); }
  void barrier_wait() { barrier()->wait(); }
  Tensor all_gather(const Tensor& input);  // allocates [world_size, ...] and waits

 protected:
  ProcessGroup(Device device, int rank, int world_size, int local_rank, int local_world_size);
  // Checks one group per collective, a tensor on device(), and (for broadcast) a root rank.
  void check_root_rank(int root, const char* op) const;
  void check_all_gather(const Tensor& input, const Tensor& output) const;

 private:
  int rank_, world_size_, local_rank_, local_world_size_;
};

// Whether this build has the MPI process group (CMake found MPI: MINIDL_WITH_MPI).
bool mpi_available();
// Whether this process was started by an MPI launcher with more than one process (the
// launchers' environment: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE... or SLURM_NTASKS).
// Works in a build without MPI too, so that such a launch is a clear error, not N copies of
// a one-process run.
bool launched_with_several_processes();

// The MPI process group over every process of the job (MPI_COMM_WORLD), CPU tensors.
// Initialises MPI on first use (Note [MPI's thread level] in parallel/mpi/mpi_runtime.h) and
// finalises it at exit. A build without MPI: a clear error.
std::shared_ptr<ProcessGroup> make_mpi_process_group();
// The NCCL process group over every process of the job, CUDA tensors on `device`
// (cuda:<local rank> by default, see process_device). Needs MPI and NCCL in the build and
// a GPU, else a clear error.
std::shared_ptr<ProcessGroup> make_nccl_process_group(Device device);
// The device a process of `group` trains on: cuda:<local rank> when CUDA devices exist (an
// error when the local rank has no device of its own), else the CPU.
Device process_device(const ProcessGroup& group);
// make_nccl_process_group(process_device(cpu group)) when CUDA devices exist, else the MPI
// group: the process group a training program wants.
std::shared_ptr<ProcessGroup> make_process_group();

// Ends every process of the job with `exit_code` after printing `why` to stderr (MPI_Abort,
// Note [a failed rank]). For a program's error path; never returns. Without MPI (or before MPI
// was initialised) it exits this process with exit_code.
[[noreturn]] void abort_job(int exit_code, const std::string& why) noexcept;

}  // namespace minidl::parallel
