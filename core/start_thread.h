// start_thread: std::thread creation for library code, with the failure as a minidl::Error.
// std::thread throws std::system_error when the system cannot make one more thread (a process
// or user thread limit, or no memory for its stack); uncaught in a worker-starting constructor
// it would end the program. start_thread names who wanted the thread and what to try instead.
//
// The seam for tests: testing::fail_thread_starts_after(k) lets the next k starts succeed and
// fails the ones after (until fail_thread_starts_after(-1)), exactly as an exhausted system
// does; a resource limit cannot stand in for it, since RLIMIT_NPROC does not bind root.
#pragma once

#include <cstdint>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.h"

namespace minidl {

namespace testing {
// k >= 0: the next k thread starts succeed, every later one fails; k < 0: none fails (the default).
void fail_thread_starts_after(int64_t k);
}  // namespace testing

namespace detail {
bool thread_start_should_fail();  // counts one start against the testing seam
[[noreturn]] void throw_thread_start_error(const std::string& who, const std::system_error& e);
}  // namespace detail

// Starts std::thread(f). `who` names the thread in the error: "DataLoader: worker 3 of 8".
template <typename F>
std::thread start_thread(const std::string& who, F&& f) {
  try {
    if (detail::thread_start_should_fail())
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread start failed (testing::fail_thread_starts_after)");
    return std::thread(std::forward<F>(f));
  } catch (const std::system_error& e) {
    detail::throw_thread_start_error(who, e);
  }
}

}  // namespace minidl
