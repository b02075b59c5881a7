// CpuCommunicator: the job queue its workers share, and the element-range kernels of
// all-reduce (Note [a fixed reduction order]) and broadcast.
#include "parallel/cpu_communicator.h"

#include <cstring>
#include <string>

#include "core/start_thread.h"

namespace minidl::parallel {

namespace {

// The element range [begin, end) of `numel` that worker `w` of `workers` owns.
struct Range {
  int64_t begin, end;
};
Range range_of(int64_t numel, int w, int workers) {
  return {numel * w / workers, numel * (w + 1) / workers};
}

template <typename T>
void all_reduce_range(const DeviceTensors& tensors, ReduceOp op, Range r) {
  T* out = tensors[0].data<T>();
  for (size_t d = 1; d < tensors.size(); ++d) {  // device order: Note [a fixed reduction order]
    const T* in = tensors[d].data<T>();
    for (int64_t i = r.begin; i < r.end; ++i) out[i] += in[i];
  }
  if (op == ReduceOp::Average) {
    const T n = static_cast<T>(tensors.size());
    for (int64_t i = r.begin; i < r.end; ++i) out[i] /= n;
  }
  for (size_t d = 1; d < tensors.size(); ++d)
    std::memcpy(tensors[d].data<T>() + r.begin, out + r.begin, sizeof(T) * static_cast<size_t>(r.end - r.begin));
}

void broadcast_range(const DeviceTensors& tensors, int root, Range r) {
  const size_t item = dtype_size(tensors[0].dtype());
  const char* src = static_cast<const char*>(tensors[root].raw_data()) + r.begin * item;
  for (size_t d = 0; d < tensors.size(); ++d)
    if (static_cast<int>(d) != root)
      std::memcpy(static_cast<char*>(tensors[d].raw_data()) + r.begin * item, src,
                  item * static_cast<size_t>(r.end - r.begin));
}

size_t bytes_per_device(const std::vector<DeviceTensors>& groups) {
  size_t bytes = 0;
  for (const DeviceTensors& g : groups) bytes += static_cast<size_t>(g[0].numel()) * dtype_size(g[0].dtype());
  return bytes;
}

std::string describe(const char* what, const std::vector<DeviceTensors>& groups, int devices) {
  return detail::make_message("cpu ", what, " of ", groups.size(), " tensor(s) over ", devices, " device(s)");
}

}  // namespace

CpuCommunicator::CpuCommunicator(std::vector<Device> devices, size_t inline_bytes)
    : Communicator(std::move(devices)), worker_count_(local_size()), inline_bytes_(inline_bytes) {
  for (const Device& d : this->devices())
    MINIDL_CHECK(d.is_cpu(), "CpuCommunicator: every device must be the CPU, got ", device_list_str(this->devices()));
  try {
    for (int w = 0; w < worker_count_; ++w) {
      const std::string who = "CpuCommunicator: worker " + std::to_string(w + 1) + " of " + std::to_string(worker_count_);
      workers_.push_back(start_thread(who, [this, w] { worker_loop(w); }));
    }
  } catch (...) {
    stop_workers();  // a thread could not start: join those that did before rethrowing
    throw;
  }
}

CpuCommunicator::~CpuCommunicator() { stop_workers(); }

void CpuCommunicator::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  job_added_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

std::shared_ptr<CollectiveWork> CpuCommunicator::launch(std::function<void(int, int)> run, std::string description,
                                                        size_t bytes) {
  if (bytes <= inline_bytes_) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (jobs_.empty()) {  // nothing earlier to complete first: Note [small CPU collectives run inline]
      auto work = std::make_shared<HostCollectiveWork>(std::move(description));
      std::exception_ptr error;
      try {
        for (int w = 0; w < worker_count_; ++w) run(w, worker_count_);
      } catch (...) {
        error = std::current_exception();
      }
      lock.unlock();
      work->complete(error);
      return work;
    }
  }
  auto job = std::make_shared<Job>();
  job->run = std::move(run);
  job->work = std::make_shared<HostCollectiveWork>(std::move(description));
  job->remaining = worker_count_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(job);
  }
  job_added_.notify_all();
  return job->work;
}

void CpuCommunicator::worker_loop(int worker) {
  const int workers = worker_count_;
  uint64_t next = 0;  // sequence number of the next job this worker runs
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      job_added_.wait(lock, [&] { return next < first_job_ + jobs_.size() || stopping_; });
      if (next >= first_job_ + jobs_.size()) return;  // stopping, and every launched job is done
      job = jobs_[next - first_job_];
    }
    ++next;
    std::exception_ptr error;
    try {
      job->run(worker, workers);
    } catch (...) {
      error = std::current_exception();
    }
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !job->error) job->error = error;
      last = --job->remaining == 0;
      // Every worker runs jobs in launch order, so the job whose last part just finished is
      // the oldest one still queued.
      if (last) {
        jobs_.pop_front();
        ++first_job_;
      }
    }
    if (last) job->work->complete(job->error);
  }
}

std::shared_ptr<CollectiveWork> CpuCommunicator::all_reduce_grouped(std::vector<DeviceTensors> groups, ReduceOp op) {
  check_groups(groups, "all_reduce");
  for (const DeviceTensors& g : groups)
    MINIDL_CHECK(g[0].dtype() == DType::Float32 || g[0].dtype() == DType::Float64,
                 "cpu all_reduce: supports float32 and float64 tensors, got ", g[0].dtype());
  std::string description = describe(op == ReduceOp::Sum ? "all_reduce(sum)" : "all_reduce(average)", groups,
                                      local_size());
  const size_t bytes = bytes_per_device(groups);
  auto shared = std::make_shared<std::vector<DeviceTensors>>(std::move(groups));
  return launch(
      [shared, op](int w, int workers) {
        for (const DeviceTensors& g : *shared) {
          const Range r = range_of(g[0].numel(), w, workers);
          if (g[0].dtype() == DType::Float32) {
            all_reduce_range<float>(g, op, r);
          } else {
            all_reduce_range<double>(g, op, r);
          }
        }
      },
      std::move(description), bytes);
}

std::shared_ptr<CollectiveWork> CpuCommunicator::broadcast_grouped(std::vector<DeviceTensors> groups, int root) {
  check_groups(groups, "broadcast");
  check_root(root, "broadcast");
  std::string description = describe("broadcast", groups, local_size());
  const size_t bytes = bytes_per_device(groups);
  auto shared = std::make_shared<std::vector<DeviceTensors>>(std::move(groups));
  return launch(
      [shared, root](int w, int workers) {
        for (const DeviceTensors& g : *shared) broadcast_range(g, root, range_of(g[0].numel(), w, workers));
      },
      std::move(description), bytes);
}

std::shared_ptr<CollectiveWork> CpuCommunicator::barrier() {
  // Workers take jobs in order: an empty job is done once all earlier ones are.
  return launch([](int, int) {}, detail::make_message("cpu barrier over ", local_size(), " device(s)"), 0);
}

}  // namespace minidl::parallel
