// ReplicaThreads: persistent threads for the replicas' forwards, created once with the
// DataParallel (starting a thread per replica per step would cost more than a small model's
// forward). run(count, task) runs task(0) on the calling thread and task(1..count-1) on the
// workers, concurrently, and returns when all have finished.
//
// The contract is kernels/cpu's ThreadPool's (part 0 on the caller, return when all are done),
// but not its implementation: a task here is a replica's whole step, milliseconds long, which
// itself runs kernels on the ThreadPool (a call from inside a pool part would run serially), so
// the workers sleep at once instead of spinning, replica i always runs on worker i, and every
// task's exception is kept (the lowest-numbered one is rethrown). Unlike the CpuCommunicator's
// workers and the MPI runtime's thread, which take an asynchronous queue of collectives, run()
// is synchronous: one run at a time, no queue.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minidl::parallel {

class ReplicaThreads {
 public:
  // replicas - 1 worker threads (replica 0 runs on the caller).
  explicit ReplicaThreads(int replicas);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  // count in [1, replicas]. When tasks throw, every task still finishes, then the exception of
  // the lowest-numbered failing task is rethrown. Not reentrant: one run at a time.
  void run(int count, const std::function<void(int replica)>& task);

 private:
  void worker_loop(int replica);
  void stop_workers();

  const int replicas_;
  std::mutex mutex_;
  std::condition_variable started_, finished_;
  uint64_t generation_ = 0;  // bumped by each run
  int count_ = 0;
  int running_ = 0;  // workers of the current run not finished yet
  const std::function<void(int)>* task_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace minidl::parallel
