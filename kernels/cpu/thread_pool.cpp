// ThreadPool: start-up, the run protocol and the workers' spin-then-sleep wait.
//
// Protocol: run() owns the pool through busy_, publishes (task_, ctx_), sets remaining_ to the
// helper parts, and stores a new work_ word (release) holding the next generation and the part
// count. A worker that sees a new word (acquire) runs its part if its index is below the count
// and then decrements remaining_; the caller runs part 0, then waits for remaining_ to reach 0
// (acquire), which also publishes the helpers' writes to it. A worker without a part touches
// nothing but work_, so the next run may start without waiting for it. Waiting is a short spin,
// then a condition variable.
#include "kernels/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/start_thread.h"

namespace minidl::cpu {

namespace {

constexpr int64_t kSpinMicros = 50;  // covers the gaps between the kernels of one training step

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins up to kSpinMicros for `done()`; false when it is still not done.
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

// The thread count as OpenMP would choose it, without linking an OpenMP runtime: the first
// value of OMP_NUM_THREADS (a list such as "4,2" gives 4) when it is a positive number, else
// the CPUs this process may run on (its affinity mask, which `taskset` and containers narrow).
int threads_from_environment() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && n > 0) return static_cast<int>(std::min<long>(n, 1 << 20));
  }
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() : ThreadPool(threads_from_environment()) {}

ThreadPool::ThreadPool(int max_threads) : max_threads_(std::clamp(max_threads, 1, 255)) {}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::start_workers() {
  // Each worker starts from the word as it is now, before the first run publishes its own: a
  // thread that read work_ only once it was running could take that run's word as old news.
  const uint64_t now = work_.load(std::memory_order_acquire);
  workers_.reserve(static_cast<size_t>(max_threads_ - 1));  // no reallocation (bad_alloc) beside a started thread
  try {
    for (int w = 1; w < max_threads_; ++w) {
      const std::string who = "cpu::ThreadPool: worker " + std::to_string(w) + " of " +
                              std::to_string(max_threads_ - 1) + " (OMP_NUM_THREADS sets the team size)";
      workers_.push_back(start_thread(who, [this, w, now] { worker_loop(w, now); }));
    }
  } catch (...) {
    // Those started wait for a run with their index in it, which a partial team would never
    // fill: tell them to exit (parts = 0) and join them; the next parallel call tries again.
    stop_workers();
    throw;
  }
}

void ThreadPool::stop_workers() {
  if (workers_.empty()) return;
  const uint64_t generation = (work_.load(std::memory_order_relaxed) >> 8) + 1;
  work_.store(generation << 8, std::memory_order_release);  // parts = 0: exit
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  work_changed_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::run_part(int part, int parts) {
  try {
    task_(ctx_, part, parts);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index, uint64_t seen) {
  while (true) {
    if (!spin_until([&] { return work_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      work_changed_.wait(lock, [&] { return work_.load(std::memory_order_acquire) != seen; });
    }
    seen = work_.load(std::memory_order_acquire);
    const int parts = static_cast<int>(seen & 0xff);
    if (parts == 0) return;
    if (index < parts) {
      run_part(index, parts);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        { std::lock_guard<std::mutex> lock(sleep_mutex_); }
        parts_done_.notify_one();
      }
    }
  }
}

void ThreadPool::run_erased(int parts, Task task, void* ctx) {
  parts = std::min(parts, max_threads_);
  bool expected = false;
  if (parts <= 1 || !busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
    for (int p = 0; p < std::max(parts, 1); ++p) task(ctx, p, std::max(parts, 1));  // alone, in order
    return;
  }
  if (!started_) {  // the first run starts the team; if it cannot, this run fails and the next tries again
    try {
      start_workers();
    } catch (...) {
      busy_.store(false, std::memory_order_release);
      throw;
    }
    started_ = true;
  }
  task_ = task;
  ctx_ = ctx;
  error_ = nullptr;
  remaining_.store(parts - 1, std::memory_order_relaxed);
  const uint64_t generation = (work_.load(std::memory_order_relaxed) >> 8) + 1;
  work_.store((generation << 8) | static_cast<uint64_t>(parts), std::memory_order_release);
  { std::lock_guard<std::mutex> lock(sleep_mutex_); }
  work_changed_.notify_all();

  run_part(0, parts);
  if (!spin_until([&] { return remaining_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    parts_done_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
  }
  std::exception_ptr error = error_;
  error_ = nullptr;
  busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

}  // namespace minidl::cpu
