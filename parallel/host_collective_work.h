// HostCollectiveWork: a CollectiveWork that host code completes — the CPU communicator's
// worker threads do, once the last of them has written its part. wait() blocks on a
// condition variable; the error recorded at completion is rethrown by every wait().
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "parallel/communicator.h"

namespace minidl::parallel {

class HostCollectiveWork final : public CollectiveWork {
 public:
  // `description` ("cpu all_reduce(sum) of 2 tensors over 3 devices") prefixes error messages.
  explicit HostCollectiveWork(std::string description) : description_(std::move(description)) {}

  bool is_completed() override;
  void wait() override;
  // Marks the work finished; a non-null `error` is what every wait() rethrows (a minidl::Error
  // as it is, anything else as a minidl::Error naming the collective). Call it once.
  void complete(std::exception_ptr error = nullptr);
  const std::string& description() const { return description_; }

 private:
  std::string description_;
  std::mutex mutex_;
  std::condition_variable completed_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace minidl::parallel
