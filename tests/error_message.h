// error_message(f): runs f, which must throw minidl::Error, and returns the message, so a test
// can check what the message says. Any other exception escapes and fails the test; no
// exception at all gives a message that no CHECK on content will accept.
#pragma once

#include <string>

#include "core/error.h"

namespace minidl::testing {

template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const minidl::Error& e) {
    return e.what();
  }
  return "<no minidl::Error was thrown>";
}

}  // namespace minidl::testing
