// minidl::Error — the one exception type of the library.
// Every check that can fail on user input throws it with a message naming the op, the
// shapes/dtypes/devices involved and what was expected. Library code never exits or aborts.
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
  (os << ... << args);
  return os.str();
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
