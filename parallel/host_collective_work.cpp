// HostCollectiveWork: completion flag, condition variable and the rethrown error.
#include "parallel/host_collective_work.h"

namespace minidl::parallel {

bool HostCollectiveWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void HostCollectiveWork::wait() {
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    completed_.wait(lock, [this] { return done_; });
    error = error_;
  }
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(description_ + " failed: " + e.what());
  } catch (...) {
    throw Error(description_ + " failed with an unknown exception");
  }
}

void HostCollectiveWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    MINIDL_CHECK(!done_, description_, ": completed twice");
    done_ = true;
    error_ = std::move(error);
  }
  completed_.notify_all();
}

}  // namespace minidl::parallel
