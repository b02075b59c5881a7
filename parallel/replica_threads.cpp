// ReplicaThreads: one generation counter and two condition variables.
#include "parallel/replica_threads.h"

#include "core/error.h"
#include "core/start_thread.h"

namespace minidl::parallel {

ReplicaThreads::ReplicaThreads(int replicas) : replicas_(replicas), errors_(replicas > 0 ? replicas : 0) {
  MINIDL_CHECK(replicas > 0, "ReplicaThreads: need at least one replica, got ", replicas);
  try {  // a thread that cannot start is a minidl::Error, after the started ones are joined
    for (int r = 1; r < replicas; ++r) {
      const std::string who = "ReplicaThreads: the thread of replica " + std::to_string(r) + " of " +
                              std::to_string(replicas);
      workers_.push_back(start_thread(who, [this, r] { worker_loop(r); }));
    }
  } catch (...) {
    stop_workers();
    throw;
  }
}

ReplicaThreads::~ReplicaThreads() { stop_workers(); }

void ReplicaThreads::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  started_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ReplicaThreads::worker_loop(int replica) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      started_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (replica >= count_) continue;  // this run needs fewer replicas
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(replica);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[replica] = error;
      if (--running_ == 0) finished_.notify_one();
    }
  }
}

void ReplicaThreads::run(int count, const std::function<void(int)>& task) {
  MINIDL_CHECK(count >= 1 && count <= replicas_, "ReplicaThreads: run needs 1 to ", replicas_, " replicas, got ",
               count);
  if (count > 1) {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    count_ = count;
    running_ = count - 1;
    for (auto& e : errors_) e = nullptr;
    ++generation_;
  }
  if (count > 1) started_.notify_all();
  std::exception_ptr first;
  try {
    task(0);
  } catch (...) {
    first = std::current_exception();
  }
  if (count > 1) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return running_ == 0; });
    task_ = nullptr;
    for (int r = 1; r < count && !first; ++r) first = errors_[r];
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace minidl::parallel
