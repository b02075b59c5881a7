// start_thread's error message and its testing seam (one atomic countdown).
#include "core/start_thread.h"

#include <atomic>

namespace minidl {

namespace {
std::atomic<int64_t> starts_before_failure{-1};  // < 0: the seam is off
}  // namespace

void testing::fail_thread_starts_after(int64_t k) { starts_before_failure.store(k < 0 ? -1 : k); }

bool detail::thread_start_should_fail() {
  int64_t left = starts_before_failure.load();
  while (left > 0 && !starts_before_failure.compare_exchange_weak(left, left - 1)) {
  }
  return left == 0;
}

void detail::throw_thread_start_error(const std::string& who, const std::system_error& e) {
  throw Error(who + ": cannot start a thread: " + e.what() +
              " (the system refused one more thread: a process or user thread limit, or no memory for its "
              "stack; ask for fewer threads or raise the limit)");
}

}  // namespace minidl
