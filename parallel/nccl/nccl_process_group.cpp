// NcclProcessGroup: the ProcessGroup of CUDA tensors — one process per GPU, through NCCL.
// Built when the build has both MPI and NCCL (MINIDL_WITH_MPI, MINIDL_WITH_NCCL).
//
// Setup: MPI starts the processes and gives the ranks (an MpiProcessGroup, kept for the life of
// this group); rank 0 makes NCCL's unique id (ncclGetUniqueId) and broadcasts it to the others
// over MPI, as bytes in a CPU tensor; every rank then joins with ncclCommInitRank on its device.
// No GPU buffer goes through MPI.
//
// Collectives follow Note [one collective on two streams] of parallel/nccl/nccl_communicator.h:
// the comm stream waits for the compute stream's work so far, runs the NCCL call, records `done`;
// wait() makes the compute stream wait for `done` without blocking the host (barrier's wait also
// blocks the host until the collective is done: that is what a barrier is for). The tensors'
// memory is marked with record_stream(comm stream), so a tensor freed early is not reused while
// NCCL still reads it. The comm stream is never destroyed (Note [comm streams live forever] in
// nccl_communicator.cpp).
//
// Failures (Note [NCCL errors] of nccl_communicator.h): is_completed() and wait() poll
// ncclCommGetAsyncError; on an error — a peer that died, a network failure — the communicator is
// aborted (ncclCommAbort frees a hung collective) and every later call throws. A peer that dies
// is usually noticed first by the launcher, which ends the job (Note [a failed rank]).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/backend.h"
#include "parallel/nccl/nccl_check.h"
#include "parallel/process_group.h"

namespace minidl::parallel {
namespace {

// What the group and its works share; freed with the last of them.
struct NcclRankState {
  Device device;
  int rank = 0, world = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t comm_stream = nullptr;     // never destroyed (see the file comment)
  cudaStream_t compute_stream = nullptr;  // the device's own (Backend::stream_handle())
  std::mutex mutex;                       // one launch at a time; guards failure
  std::string failure;                    // set once the communicator was aborted

  ~NcclRankState() {
    if (comm == nullptr) return;
    CurrentDeviceGuard guard(device, CurrentDeviceGuard::Quiet{});
    if (failure.empty()) poll_locked();
    if (failure.empty()) {
      (void)cudaStreamSynchronize(comm_stream);
      (void)ncclCommDestroy(comm);
    }  // an aborted communicator was freed by ncclCommAbort
  }

  // Polls NCCL's asynchronous error; on one, aborts the communicator. Never throws.
  bool poll_locked() noexcept {
    if (!failure.empty()) return true;
    ncclResult_t async = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(comm, &async);
    if (status != ncclSuccess) async = status;
    if (async == ncclSuccess || async == ncclInProgress) return false;
    try {
      failure = std::string("NCCL reported an asynchronous error on rank ") + std::to_string(rank) + " (" +
                device.str() + "): " + ncclGetErrorString(async);
    } catch (...) {
      failure = "NCCL reported an asynchronous error";
    }
    (void)ncclCommAbort(comm);
    return true;
  }

  void check_locked(const std::string& who) {
    poll_locked();
    MINIDL_CHECK(failure.empty(), who, ": ", failure, "; the NCCL communicator of rank ", rank, " of ", world,
                 " was aborted");
  }
};

class NcclRankWork final : public CollectiveWork {
 public:
  NcclRankWork(std::shared_ptr<NcclRankState> state, cudaEvent_t done, std::string description, bool host_wait)
      : state_(std::move(state)), done_(done), description_(std::move(description)), host_wait_(host_wait) {}
  ~NcclRankWork() override {
    CurrentDeviceGuard guard(state_->device, CurrentDeviceGuard::Quiet{});
    (void)cudaEventDestroy(done_);
  }

  bool is_completed() override {
    {
      std::unique_lock<std::mutex> lock(state_->mutex, std::try_to_lock);
      if (lock.owns_lock() && state_->poll_locked()) return true;  // failed: wait() throws
    }
    CurrentDeviceGuard guard(state_->device);
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    MINIDL_NCCL_CUDA_CHECK(status);
    return true;
  }

  void wait() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->check_locked(description_);
    }
    CurrentDeviceGuard guard(state_->device);
    MINIDL_NCCL_CUDA_CHECK(cudaStreamWaitEvent(state_->compute_stream, done_, 0));
    if (!host_wait_) return;
    // A barrier: block the host, polling so that an aborted peer is an error, not a hang.
    while (!is_completed()) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->check_locked(description_);
  }

 private:
  std::shared_ptr<NcclRankState> state_;
  cudaEvent_t done_;
  std::string description_;
  bool host_wait_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(Device device, std::shared_ptr<ProcessGroup> bootstrap)
      : ProcessGroup(device, bootstrap->rank(), bootstrap->world_size(), bootstrap->local_rank(),
                     bootstrap->local_world_size()),
        bootstrap_(std::move(bootstrap)), state_(std::make_shared<NcclRankState>()) {
    state_->device = device;
    state_->rank = rank();
    state_->world = world_size();
    // Rank 0's unique id, broadcast over MPI as bytes.
    static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0, "ncclUniqueId is whole int64 words");
    Tensor id_words = zeros(Shape{static_cast<int64_t>(sizeof(ncclUniqueId) / sizeof(int64_t))}, TensorOptions(DType::Int64));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank() == 0) {
      MINIDL_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
      std::memcpy(id_words.raw_data(), &id, sizeof(id));
    }
    bootstrap_->broadcast_(id_words, 0);
    std::memcpy(&id, id_words.raw_data(), sizeof(id));
    CurrentDeviceGuard guard(device);
    const ncclResult_t status = ncclCommInitRank(&state_->comm, world_size(), id, rank());
    if (status != ncclSuccess) {
      state_->comm = nullptr;
      nccl::throw_nccl_error(status, nullptr, "ncclCommInitRank(&state_->comm, world_size(), id, rank())", __FILE__,
                             __LINE__);
    }
    MINIDL_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->comm_stream, cudaStreamNonBlocking));
    state_->compute_stream = static_cast<cudaStream_t>(backend_for(device).stream_handle());
  }

  std::string backend_name() const override { return "nccl"; }

  std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) override {
    check_groups(groups, "all_reduce");
    for (const DeviceTensors& g : groups)
      MINIDL_CHECK(op == ReduceOp::Sum || g[0].dtype() != DType::Int64, "nccl process group all_reduce: average of ",
                   g[0].dtype(), " tensors is not defined; sum them, or average floating-point tensors");
    const ncclRedOp_t nccl_op = op == ReduceOp::Sum ? ncclSum : ncclAvg;
    return launch(groups, "all_reduce(" + std::string(reduce_op_name(op)) + ")", false, [&](ncclComm_t comm, cudaStream_t s) {
      for (const DeviceTensors& g : groups) {
        const Tensor& t = g[0];
        if (t.numel() == 0) continue;
        MINIDL_NCCL_CHECK(comm, ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                                              nccl::nccl_dtype(t.dtype(), "nccl process group"), nccl_op, comm, s));
      }
    });
  }

  std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) override {
    check_groups(groups, "broadcast");
    check_root_rank(root, "broadcast");
    return launch(groups, "broadcast(root " + std::to_string(root) + ")", false, [&](ncclComm_t comm, cudaStream_t s) {
      for (const DeviceTensors& g : groups) {
        const Tensor& t = g[0];
        if (t.numel() == 0) continue;
        MINIDL_NCCL_CHECK(comm, ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                                              nccl::nccl_dtype(t.dtype(), "nccl process group"), root, comm, s));
      }
    });
  }

  std::shared_ptr<CollectiveWork> all_gather(const Tensor& input, const Tensor& output) override {
    check_all_gather(input, output);
    return launch({{input}, {output}}, "all_gather", false, [&](ncclComm_t comm, cudaStream_t s) {
      if (input.numel() == 0) return;
      MINIDL_NCCL_CHECK(comm, ncclAllGather(input.raw_data(), output.raw_data(), static_cast<size_t>(input.numel()),
                                            nccl::nccl_dtype(input.dtype(), "nccl process group"), comm, s));
    });
  }

  // NCCL has no barrier: a one-element all-reduce, which no rank finishes before every rank has
  // joined it, and whose wait() blocks the host.
  std::shared_ptr<CollectiveWork> barrier() override {
    Tensor token = zeros(Shape{1}, TensorOptions(DType::Float32, device()));
    return launch({{token}}, "barrier", true, [&](ncclComm_t comm, cudaStream_t s) {
      MINIDL_NCCL_CHECK(comm, ncclAllReduce(token.raw_data(), token.raw_data(), 1, ncclFloat32, ncclSum, comm, s));
    });
  }

 private:
  template <typename Calls>
  std::shared_ptr<CollectiveWork> launch(const std::vector<DeviceTensors>& groups, const std::string& what,
                                         bool host_wait, const Calls& calls) {
    const std::string description = "nccl " + what + " on rank " + std::to_string(rank()) + " of " +
                                    std::to_string(world_size()) + " (" + device().str() + ")";
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->check_locked(description);
    for (const DeviceTensors& g : groups) (void)nccl::nccl_dtype(g[0].dtype(), "nccl process group");
    CurrentDeviceGuard guard(device());
    cudaEvent_t done = nullptr;
    MINIDL_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    bool launched = false;
    try {
      MINIDL_NCCL_CUDA_CHECK(cudaEventRecord(done, state_->compute_stream));  // doubles as "ready"
      MINIDL_NCCL_CUDA_CHECK(cudaStreamWaitEvent(state_->comm_stream, done, 0));
      for (const DeviceTensors& g : groups)
        if (g[0].numel() > 0)
          backend_for(g[0].device()).record_stream(g[0], state_->comm_stream);
      MINIDL_NCCL_CHECK(state_->comm, ncclGroupStart());
      try {
        calls(state_->comm, state_->comm_stream);
      } catch (...) {
        (void)ncclGroupEnd();
        throw;
      }
      launched = true;
      MINIDL_NCCL_CHECK(state_->comm, ncclGroupEnd());
      MINIDL_NCCL_CUDA_CHECK(cudaEventRecord(done, state_->comm_stream));
    } catch (const std::exception& e) {
      // Launched on this rank but reported as failed: no later collective could match up.
      if (launched && state_->failure.empty()) {
        state_->failure = description + " failed after its launch: " + e.what();
        (void)ncclCommAbort(state_->comm);
      }
      (void)cudaEventDestroy(done);
      throw;
    }
    return std::make_shared<NcclRankWork>(state_, done, description, host_wait);
  }

  std::shared_ptr<ProcessGroup> bootstrap_;  // the MPI group the ranks came from
  std::shared_ptr<NcclRankState> state_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(Device device) {
  MINIDL_CHECK(device.is_cuda(), "make_nccl_process_group: ", device, " is not a CUDA device; the MPI process group "
               "(make_mpi_process_group) carries CPU tensors");
  check_cuda_devices_exist({device}, "make_nccl_process_group");
  return std::make_shared<NcclProcessGroup>(device, make_mpi_process_group());
}

}  // namespace minidl::parallel
