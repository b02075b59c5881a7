// The MPI runtime: the MPI thread, its job queue, initialisation and the exit handler that
// finalises (Note [MPI's thread level] in mpi_runtime.h).
#include "parallel/mpi/mpi_runtime.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace minidl::parallel::mpi {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// The MPI thread and its queue. Never destroyed (the exit handler stops the thread): a static
// destructor could run while a late job still uses MPI.
class Runtime {
 public:
  static Runtime& get() {
    static Runtime* runtime = new Runtime();
    return *runtime;
  }

  void ensure_initialized() {
    std::lock_guard<std::mutex> lock(init_mutex_);
    MINIDL_CHECK(!finalized_, "MPI: the process group is used after MPI was finalised (at exit); MPI cannot be "
                 "initialised twice in one process");
    if (initialized_) return;
    thread_ = std::thread([this] { loop(); });
    try {
      run([&] {
      // MPI cannot be initialised twice in a process: a second try after a refused thread level
      // repeats the first refusal instead of blaming the program.
      MINIDL_CHECK(refused_level_.empty(), refused_level_);
      int already = 0;
      MPI_Initialized(&already);
      MINIDL_CHECK(!already, "MPI: MPI was initialised outside minidl; minidl initialises it itself (on its MPI "
                   "thread, Note [MPI's thread level]), so a program must not call MPI_Init");
      int provided = MPI_THREAD_SINGLE;
      // MULTIPLE for abort_job's MPI_Abort from another thread; SERIALIZED is what the rest needs
      // (Note [MPI's thread level]).
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      MINIDL_CHECK(rc == MPI_SUCCESS, "MPI: MPI_Init_thread failed with code ", rc);
      if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        refused_level_ = std::string("MPI: the MPI library provides only ") + thread_level_name(provided) +
                         "; minidl needs MPI_THREAD_SERIALIZED (MPI is called from the MPI thread and, for small "
                         "collectives, from the thread that launches them, never from two at once)";
        throw Error(refused_level_);
      }
      // Errors are return codes (checked by MINIDL_MPI_CHECK), not MPI's default abort.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      });
    } catch (...) {
      submit(nullptr);  // stop the thread; a later call starts afresh (and fails the same way)
      thread_.join();
      throw;
    }
    initialized_ = true;
    std::atexit([] { Runtime::get().finalize(); });
  }

  void submit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    added_.notify_one();
  }

  void run(const std::function<void()>& job) {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    submit([&] {
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(m);
        done = true;
      }
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }

  // Note [small collectives run inline] in mpi_runtime.h.
  bool try_run_inline(const std::function<void()>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!jobs_.empty() || busy_) return false;
      busy_ = true;
    }
    struct Release {
      Runtime& r;
      ~Release() {
        {
          std::lock_guard<std::mutex> lock(r.mutex_);
          r.busy_ = false;
        }
        r.added_.notify_all();
      }
    } release{*this};
    job();
    return true;
  }

  bool active() {
    std::lock_guard<std::mutex> lock(init_mutex_);
    return initialized_ && !finalized_;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        added_.wait(lock, [&] { return !jobs_.empty() && !busy_; });
        job = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = job != nullptr;
      }
      if (!job) return;  // the exit handler's stop mark
      job();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        busy_ = false;
      }
      added_.notify_all();
    }
  }

  // The exit handler: MPI_Finalize on the MPI thread, then the thread ends. Process groups the
  // program still holds are past use (their collectives were waited for, or the job is ending).
  void finalize() noexcept {
    std::lock_guard<std::mutex> lock(init_mutex_);
    if (!initialized_ || finalized_) return;
    finalized_ = true;
    try {
      run([] { MPI_Finalize(); });
      submit(nullptr);
      thread_.join();
    } catch (...) {  // no exceptions out of an exit handler
    }
  }

  std::mutex init_mutex_;
  bool initialized_ = false, finalized_ = false;
  std::string refused_level_;  // set when MPI refused the thread level (MPI was finalised then)
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable added_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false;  // a job is running (on the MPI thread or inline): MPI is in use
};

}  // namespace

void ensure_initialized() { Runtime::get().ensure_initialized(); }
void submit(std::function<void()> job) { Runtime::get().submit(std::move(job)); }
void run(const std::function<void()>& job) { Runtime::get().run(job); }
bool active() { return Runtime::get().active(); }
bool try_run_inline(const std::function<void()>& job) { return Runtime::get().try_run_inline(job); }

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  throw Error(std::string("MPI: ") + call + " failed with code " + std::to_string(rc) +
              (length > 0 ? std::string(": ") + std::string(text, static_cast<size_t>(length)) : std::string()));
}

}  // namespace minidl::parallel::mpi
