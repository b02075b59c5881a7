// ThreadPool: the worker team behind the CPU kernels' parallel loops (parallel_for,
// parallel_rows, the GEMM) and behind minidl::host_parallel_for (core/host_parallel.h). A fixed
// set of threads (OMP_NUM_THREADS, as OpenMP counts them, minus the caller) waits for work;
// run(parts, f) calls f(part, parts) for every part, part 0 on the calling thread, and returns
// when all are done.
//
// Why not `#pragma omp parallel`: libgomp's idle threads spin (up to about a millisecond by
// default) before they sleep, and every region ends with a barrier. On a machine shared with
// other work that combination stalls: a spinning thread takes the core its descheduled partner
// needs, and a region waits a whole scheduler slice for it. On a 2-core Intel Xeon VM under
// load, one step of the Fashion-MNIST MLP on 2 threads cost 6.6-7.7 ms of CPU time with
// libgomp's default policy and 1.2 ms with OMP_WAIT_POLICY=passive. This pool spins only briefly
// (kSpinMicros) and then sleeps on a condition variable, so an idle or waiting thread
// gives its core back, while back-to-back kernels on a quiet machine still find it awake.
//
// A call made while the pool is already running (from a DataLoader worker thread, say, or from
// inside a part) runs all its parts on its own thread, in order: the same parts, so the same
// results, only without the helpers.
//
// One of four hand-made thread queues in minidl, each shaped by its work: this pool
// (synchronous fork-join of microsecond parts), parallel::ReplicaThreads (synchronous
// fork-join of whole replica steps), the CpuCommunicator's workers (an asynchronous queue every
// worker drains in full) and the MPI runtime's thread (an asynchronous queue on the one thread
// allowed to call MPI). Only this one and ReplicaThreads share a contract, part 0 on the
// caller, and they are still kept apart: a kernel's parts last microseconds, so the pool spins
// before it sleeps, hands its work over in one atomic word and takes a plain function pointer
// (no allocation per call); a replica's step lasts milliseconds and itself calls the kernels,
// so it must run on threads other than this pool's (a call from inside a part runs
// serially). A shared class would also have to live in core/, which parallel/ and kernels/
// both reach, for a gain of a few dozen lines.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace minidl::cpu {

class ThreadPool {
 public:
  // The process-wide pool (its threads start at the first parallel call).
  static ThreadPool& instance();
  // A pool of its own with max_threads threads, the caller included (clamped to [1, 255]); for
  // tests, which need one whose team has not started yet. The kernels use instance().
  explicit ThreadPool(int max_threads);

  // Threads a parallel loop may use, the caller included: OMP_NUM_THREADS (its first value),
  // else the CPUs this process may run on. No OpenMP runtime is involved.
  int max_threads() const { return max_threads_; }

  // Calls f(part, parts) for part in [0, parts); parts is capped at max_threads(). The first
  // exception thrown by a part is rethrown here once every part has finished. The first run
  // with parts > 1 starts the team; a thread the system refuses is a minidl::Error (no part
  // has run then), and the next such run tries to start the team again.
  template <typename F>
  void run(int parts, F&& f) {
    using Fn = std::remove_reference_t<F>;  // F is a reference type for an lvalue argument
    auto trampoline = [](void* ctx, int part, int n) { (*static_cast<Fn*>(ctx))(part, n); };
    run_erased(parts, trampoline, const_cast<void*>(static_cast<const void*>(&f)));
  }

  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  using Task = void (*)(void* ctx, int part, int parts);
  ThreadPool();
  void run_erased(int parts, Task task, void* ctx);
  void start_workers();
  void stop_workers();  // tells the workers to exit and joins them
  void worker_loop(int index, uint64_t seen);
  void run_part(int part, int parts);

  int max_threads_;  // at most 255: the part count shares work_ with the generation
  std::vector<std::thread> workers_;
  bool started_ = false;  // the team is running (set and read only by the run that holds busy_)
  std::atomic<bool> busy_{false};  // a run is in progress
  // (generation << 8) | parts: a new value per run; parts = 0 tells the workers to exit. One
  // word, so a worker never pairs one run's generation with another run's part count.
  std::atomic<uint64_t> work_{0};
  std::atomic<int> remaining_{0};  // helper parts not finished yet
  // Sleeping after the spin: workers wait on work_changed_, the caller on parts_done_. Each
  // change is made, then the mutex taken and released, then the notify sent, so a thread that
  // checked under the mutex and went to sleep cannot miss it.
  std::mutex sleep_mutex_;
  std::condition_variable work_changed_, parts_done_;
  Task task_ = nullptr;            // read only by helpers that have a part (the caller waits for them)
  void* ctx_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace minidl::cpu
