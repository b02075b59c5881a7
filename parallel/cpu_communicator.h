// CpuCommunicator: collectives between CPU replicas of one process, run asynchronously by one
// worker thread per replica. Each collective is cut into as many element ranges as there are
// workers; worker w reduces (or copies) range w of every tensor. Workers take collectives in
// launch order, so they complete in that order, like NCCL calls on one stream.
//
// Note [a fixed reduction order]: element i of an all-reduce is always
// ((t0[i] + t1[i]) + t2[i]) + ... in device order, then divided by n for Average, whichever
// worker computes it and whenever — so the result is the same bits every run, on every
// device, independent of timing, of the number of workers and of how tensors are grouped.
//
// Note [small CPU collectives run inline]: waking a worker costs tens of microseconds (more on a
// busy machine), far more than summing a few kilobytes. A collective of at most
// `inline_bytes` per device, launched while no other is queued, is therefore run to completion
// by the caller and returns a completed work — same element ranges, same order, same bits.
//
// The workers' queue is not kernels/cpu's ThreadPool nor parallel::ReplicaThreads, which are
// synchronous (run() returns when every part is done): a collective is launched from a gradient
// hook and must return at once, so jobs_ is an asynchronous FIFO, and every worker takes every
// job (its own element range of it), not one worker per job. Jobs complete in launch order and
// the destructor completes the queued ones first. The MPI runtime's queue is asynchronous too,
// but has one thread, the only one allowed to call MPI (Note [MPI's thread level]); here the
// workers call nothing but the kernels, so they are many, one per replica.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/host_collective_work.h"

namespace minidl::parallel {

class CpuCommunicator final : public Communicator {
 public:
  // Every device must be the CPU; one worker thread per entry. inline_bytes: Note [small CPU
  // collectives run inline] (0: every collective goes to the workers).
  static constexpr size_t kDefaultInlineBytes = size_t{64} << 10;
  explicit CpuCommunicator(std::vector<Device> devices, size_t inline_bytes = kDefaultInlineBytes);
  // Completes every collective already launched (their waits return), then joins the workers.
  ~CpuCommunicator() override;

  std::string backend_name() const override { return "cpu"; }
  // float32 and float64 tensors.
  std::shared_ptr<CollectiveWork> all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) override;
  std::shared_ptr<CollectiveWork> broadcast_grouped(std::vector<DeviceTensors> groups, int root) override;
  std::shared_ptr<CollectiveWork> barrier() override;

 private:
  // One launched collective: every worker runs run(worker, workers) once.
  struct Job {
    std::function<void(int worker, int workers)> run;
    std::shared_ptr<HostCollectiveWork> work;
    int remaining = 0;  // workers that have not finished their part (guarded by mutex_)
    std::exception_ptr error;  // the first part's failure (guarded by mutex_)
  };

  // `bytes`: what the collective moves per device (for the inline rule).
  std::shared_ptr<CollectiveWork> launch(std::function<void(int, int)> run, std::string description, size_t bytes);
  void worker_loop(int worker);
  void stop_workers();

  const int worker_count_;  // one per device
  const size_t inline_bytes_;
  std::mutex mutex_;
  std::condition_variable job_added_;
  std::deque<std::shared_ptr<Job>> jobs_;  // launched, not yet completed, in launch order
  uint64_t first_job_ = 0;                 // sequence number of jobs_.front()
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace minidl::parallel
