// NcclCommunicator: all-reduce, broadcast and barrier over the CUDA devices of one process,
// with NCCL on a communication stream per device (Notes in parallel/nccl/nccl_communicator.h).
#include "parallel/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>

#include "core/backend.h"
#include "parallel/nccl/nccl_check.h"

namespace minidl::parallel {
namespace {

// Note [comm streams live forever]: the caching allocator remembers each stream a block was
// used on (record_stream) until the block is freed, which may be long after the communicator
// is gone: replicas' parameters outlive DataParallel's communicator. So a comm stream is never
// destroyed. A communicator takes one per device from this pool and gives it back, idle, when
// it is destroyed; each live communicator has streams of its own (two communicators sharing one,
// launched from two threads, could queue their collectives in different orders on two devices
// and deadlock).
std::mutex& stream_pool_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::vector<cudaStream_t>>& stream_pool() {
  static auto* pool = new std::vector<std::vector<cudaStream_t>>();  // never freed: see the Note
  return *pool;
}
// With `device` current.
cudaStream_t acquire_comm_stream(int device) {
  {
    std::lock_guard<std::mutex> lock(stream_pool_mutex());
    auto& pool = stream_pool();
    if (static_cast<size_t>(device) < pool.size() && !pool[static_cast<size_t>(device)].empty()) {
      cudaStream_t s = pool[static_cast<size_t>(device)].back();
      pool[static_cast<size_t>(device)].pop_back();
      return s;
    }
  }
  cudaStream_t s = nullptr;
  MINIDL_NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void release_comm_stream(int device, cudaStream_t s) noexcept {
  try {
    std::lock_guard<std::mutex> lock(stream_pool_mutex());
    auto& pool = stream_pool();
    if (pool.size() <= static_cast<size_t>(device)) pool.resize(static_cast<size_t>(device) + 1);
    pool[static_cast<size_t>(device)].push_back(s);
  } catch (...) {
    // Out of memory for the pool's vector: the stream is leaked, which is harmless.
  }
}

// What the communicator and every work it hands out share: the NCCL communicators, the
// streams, and whether the communicators failed. A work may outlive the communicator, so the
// state is freed with its last user.
struct NcclState {
  std::vector<Device> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> comm_streams;
  std::vector<cudaStream_t> compute_streams;  // the devices' own (Backend::stream_handle())
  std::mutex mutex;                            // one launch at a time; guards failure
  std::string failure;                         // set once the communicators were aborted

  ~NcclState() {
    // No throwing here. A communicator with an asynchronous error is aborted rather than
    // waited for (its collective may never finish); otherwise its queued collectives finish.
    if (failure.empty()) poll_async_locked();
    for (size_t i = 0; i < comms.size(); ++i) {
      CurrentDeviceGuard guard(devices[i], CurrentDeviceGuard::Quiet{});
      const bool has_stream = i < comm_streams.size();  // the constructor may have failed midway
      if (failure.empty()) {
        if (has_stream) (void)cudaStreamSynchronize(comm_streams[i]);
        (void)ncclCommDestroy(comms[i]);
      }
      // An aborted communicator's streams are left alone (leaked): work stuck on them would
      // hold up the next communicator that took them.
      if (has_stream && failure.empty()) release_comm_stream(devices[i].index, comm_streams[i]);
    }
  }

  // Sets `failure` and aborts every communicator (ncclCommAbort also frees a hung collective).
  void poison_locked(std::string what) noexcept {
    if (!failure.empty()) return;
    failure = std::move(what);
    for (ncclComm_t c : comms) (void)ncclCommAbort(c);
  }

  // Polls NCCL's asynchronous errors (Note [NCCL errors]); on one, poisons the state. Never
  // throws. Call with `mutex` held (or from the destructor). Returns whether the state failed.
  bool poll_async_locked() noexcept {
    for (size_t i = 0; i < comms.size() && failure.empty(); ++i) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t status = ncclCommGetAsyncError(comms[i], &async);
      if (status != ncclSuccess) async = status;
      if (async == ncclSuccess || async == ncclInProgress) continue;
      try {
        std::ostringstream os;
        os << "NCCL reported an asynchronous error on " << devices[i] << " (rank " << i << "): "
           << ncclGetErrorString(async);
        const char* last = ncclGetLastError(comms[i]);
        if (last != nullptr && last[0] != '\0') os << ": " << last;
        poison_locked(os.str());
      } catch (...) {
        poison_locked("NCCL reported an asynchronous error");
      }
    }
    return !failure.empty();
  }

  // Throws if the communicators failed before or fail now. Call with `mutex` held.
  void check_async_locked(const std::string& who) {
    poll_async_locked();
    MINIDL_CHECK(failure.empty(), who, ": ", failure, "; the NCCL communicators over ", device_list_str(devices),
                 " were aborted, make a new DataParallel (or communicator) to go on");
  }
};

// One launched collective: an event per device recorded on its comm stream after the NCCL
// calls (Note [one collective on two streams]).
class NcclWork final : public CollectiveWork {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::vector<cudaEvent_t> done, std::string description)
      : state_(std::move(state)), done_(std::move(done)), description_(std::move(description)) {}

  ~NcclWork() override {
    for (size_t i = 0; i < done_.size(); ++i) {
      CurrentDeviceGuard guard(state_->devices[i], CurrentDeviceGuard::Quiet{});
      (void)cudaEventDestroy(done_[i]);  // the event is released once it has completed
    }
  }

  bool is_completed() override {
    {
      // Never blocks: while another thread launches, the poll waits for the next call.
      std::unique_lock<std::mutex> lock(state_->mutex, std::try_to_lock);
      if (lock.owns_lock() && state_->poll_async_locked()) return true;  // failed: wait() throws
    }
    for (size_t i = 0; i < done_.size(); ++i) {
      CurrentDeviceGuard guard(state_->devices[i]);
      const cudaError_t status = cudaEventQuery(done_[i]);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();  // not an error: clear it, or the next launch check reports it
        return false;
      }
      MINIDL_NCCL_CUDA_CHECK(status);
    }
    return true;
  }

  void wait() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->check_async_locked(description_);
    }
    for (size_t i = 0; i < done_.size(); ++i) {
      CurrentDeviceGuard guard(state_->devices[i]);
      MINIDL_NCCL_CUDA_CHECK(cudaStreamWaitEvent(state_->compute_streams[i], done_[i], 0));
    }
  }

 private:
  std::shared_ptr<NcclState> state_;
  std::vector<cudaEvent_t> done_;
  std::string description_;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::vector<Device> devices) : Communicator(devices), state_(std::make_shared<NcclState>()) {
    state_->devices = devices;
    std::vector<int> indices;
    for (const Device& d : devices) indices.push_back(d.index);
    const int n = static_cast<int>(devices.size());
    state_->comms.assign(devices.size(), nullptr);
    const ncclResult_t status = ncclCommInitAll(state_->comms.data(), n, indices.data());
    if (status != ncclSuccess) {
      state_->comms.clear();  // nothing to destroy
      const char* last = ncclGetLastError(nullptr);
      throw Error("NCCL communicator over " + device_list_str(devices) + ": ncclCommInitAll failed with NCCL error " +
                  std::to_string(static_cast<int>(status)) + " (" + ncclGetErrorString(status) + ")" +
                  (last != nullptr && last[0] != '\0' ? std::string(": ") + last : std::string()));
    }
    for (const Device& d : devices) {
      CurrentDeviceGuard guard(d);
      state_->comm_streams.push_back(acquire_comm_stream(d.index));
      state_->compute_streams.push_back(static_cast<cudaStream_t>(backend_for(d).stream_handle()));
    }
  }

  std::string backend_name() const override { return "nccl"; }

  std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) override {
    check_groups(groups, "all_reduce");
    for (const DeviceTensors& g : groups)
      MINIDL_CHECK(op == ReduceOp::Sum || g[0].dtype() != DType::Int64, "nccl all_reduce: average of ", g[0].dtype(),
                   " tensors is not defined; sum them, or average float32 tensors");
    const ncclRedOp_t nccl_op = op == ReduceOp::Sum ? ncclSum : ncclAvg;
    return launch(groups, describe("all_reduce(" + std::string(reduce_op_name(op)) + ")", groups.size()),
                  [&](const Tensor& t, size_t rank) {
                    void* p = t.raw_data();
                    const ncclDataType_t type = nccl::nccl_dtype(t.dtype(), "nccl communicator");
                    MINIDL_NCCL_CHECK(state_->comms[rank],
                                      ncclAllReduce(p, p, static_cast<size_t>(t.numel()), type, nccl_op,
                                                    state_->comms[rank], state_->comm_streams[rank]));
                  });
  }

  std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) override {
    check_groups(groups, "broadcast");
    check_root(root, "broadcast");
    return launch(groups, describe("broadcast(root " + std::to_string(root) + ")", groups.size()),
                  [&](const Tensor& t, size_t rank) {
                    void* p = t.raw_data();
                    const ncclDataType_t type = nccl::nccl_dtype(t.dtype(), "nccl communicator");
                    MINIDL_NCCL_CHECK(state_->comms[rank],
                                      ncclBroadcast(p, p, static_cast<size_t>(t.numel()), type, root,
                                                    state_->comms[rank], state_->comm_streams[rank]));
                  });
  }

  // In one process every collective is already ordered on the comm streams: the barrier's
  // events, recorded after them, complete once they have on every device.
  std::shared_ptr<CollectiveWork> barrier() override { return launch({}, describe("barrier", 0), nullptr); }

 private:
  std::string describe(const std::string& what, size_t tensors) const {
    return "nccl " + what + " of " + std::to_string(tensors) + " tensor(s) over " + device_list_str(devices());
  }

  // Note [one collective on two streams]; `call(tensor, rank)` issues one NCCL call.
  template <typename Call>
  std::shared_ptr<CollectiveWork> launch(const std::vector<DeviceTensors>& groups, std::string description,
                                         const Call& call) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->check_async_locked(description);
    // Throws before the group, not inside it.
    for (const DeviceTensors& g : groups) (void)nccl::nccl_dtype(g[0].dtype(), "nccl communicator");
    const size_t n = devices().size();
    bool launched = false;  // the NCCL calls may be running: a failure after that poisons the state
    std::vector<cudaEvent_t> done(n, nullptr);
    auto destroy_events = [&] {
      for (size_t i = 0; i < n; ++i)
        if (done[i] != nullptr) {
          CurrentDeviceGuard guard(devices()[i], CurrentDeviceGuard::Quiet{});
          (void)cudaEventDestroy(done[i]);
        }
    };
    try {
      for (size_t i = 0; i < n; ++i) {
        CurrentDeviceGuard guard(devices()[i]);
        MINIDL_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
        // The comm stream starts after everything queued so far on the compute stream (the
        // producers of the tensors); `done` doubles as the "ready" event here.
        MINIDL_NCCL_CUDA_CHECK(cudaEventRecord(done[i], state_->compute_streams[i]));
        MINIDL_NCCL_CUDA_CHECK(cudaStreamWaitEvent(state_->comm_streams[i], done[i], 0));
        for (const DeviceTensors& g : groups)
          if (g[i].numel() > 0)
            backend_for(g[i].device()).record_stream(g[i], state_->comm_streams[i]);
      }
      if constexpr (!std::is_same_v<Call, std::nullptr_t>) {
        MINIDL_NCCL_CHECK(nullptr, ncclGroupStart());
        try {
          for (const DeviceTensors& g : groups) {
            if (g[0].numel() == 0) continue;  // every device passes the same shape
            for (size_t i = 0; i < n; ++i) call(g[i], i);
          }
        } catch (...) {
          (void)ncclGroupEnd();  // a failed call inside the group: NCCL launches none of it
          throw;
        }
        launched = true;
        MINIDL_NCCL_CHECK(nullptr, ncclGroupEnd());
      }
      for (size_t i = 0; i < n; ++i) {
        CurrentDeviceGuard guard(devices()[i]);
        MINIDL_NCCL_CUDA_CHECK(cudaEventRecord(done[i], state_->comm_streams[i]));
      }
    } catch (const std::exception& e) {
      // After the launch, some devices may run the collective while the caller is told it
      // failed: no later collective could match up, so the communicators are aborted.
      if (launched) state_->poison_locked(description + " failed after its launch: " + e.what());
      destroy_events();
      throw;
    }
    return std::make_shared<NcclWork>(state_, std::move(done), std::move(description));
  }

  std::shared_ptr<NcclState> state_;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(const std::vector<Device>& devices) {
  check_device_list(devices, "nccl communicator");
  check_cuda_devices_exist(devices, "nccl communicator");
  MINIDL_CHECK(devices[0].is_cuda(), "nccl communicator: the devices ", device_list_str(devices),
               " are not CUDA devices; CPU replicas use the cpu communicator");
  return std::make_shared<NcclCommunicator>(devices);
}

}  // namespace minidl::parallel
