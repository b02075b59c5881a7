// minidl::Error — the exception type of the library, and the check macros that throw it.
// Every check that can fail on user input throws an Error with a message naming the op, the
// shapes/dtypes/devices involved and what was expected. One subclass marks a failure a caller
// may want to handle apart: OutOfMemory (a device allocation that could not be satisfied), so
// `catch (const minidl::Error&)` still catches everything. Library code never exits or aborts.
//
// Two kinds of check (PyTorch's TORCH_CHECK / TORCH_INTERNAL_ASSERT split):
//   MINIDL_CHECK            what a user can get wrong; always on; the message is for the user.
//   MINIDL_INTERNAL_ASSERT  what the library itself guarantees (a backend re-stating what the op
//                           layer checked, core/backend.h); on in debug builds only (NDEBUG
//                           unset), where a failure is a bug in minidl, reported as an Error.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace minidl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Thrown when a device allocation cannot be satisfied (the CUDA allocator fills the message).
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& what) : Error(what) {}
};

namespace detail {
// Streams every argument into one string: make_message("linear: x is ", shape, ", W is ", ...).
template <typename... Args>
std::string make_message(const Args&... args) {
  std::ostringstream os;
  if constexpr (sizeof...(Args) > 0) (os << ... << args);
  return os.str();
}

[[noreturn]] inline void internal_assert_failed(const char* condition, const char* file, int line,
                                                const std::string& detail) {
  throw Error(make_message("internal assertion failed at ", file, ":", line, ": ", condition,
                           detail.empty() ? "" : " (", detail, detail.empty() ? "" : ")",
                           "; this is a bug in minidl, not in the caller's input"));
}
}  // namespace detail

}  // namespace minidl

// MINIDL_CHECK(cond, "op: message parts", ...) throws minidl::Error when cond is false.
#define MINIDL_CHECK(cond, ...)                                           \
  do {                                                                    \
    if (!(cond)) {                                                        \
      throw ::minidl::Error(::minidl::detail::make_message(__VA_ARGS__)); \
    }                                                                     \
  } while (0)

// MINIDL_INTERNAL_ASSERT(cond [, "message parts", ...]): in a debug build, throws minidl::Error
// naming the condition, file and line when cond is false; in a release build (NDEBUG) it
// compiles to nothing (the condition is not evaluated).
#ifdef NDEBUG
#define MINIDL_INTERNAL_ASSERT(cond, ...) \
  do {                                    \
    (void)sizeof(!(cond));                \
  } while (0)
#else
#define MINIDL_INTERNAL_ASSERT(cond, ...)                                                              \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      ::minidl::detail::internal_assert_failed(#cond, __FILE__, __LINE__,                              \
                                               ::minidl::detail::make_message(__VA_ARGS__));           \
    }                                                                                                  \
  } while (0)
#endif
