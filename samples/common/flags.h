// Flag checks shared by the samples' command lines (CLI11), with messages that say what was
// expected: CLI::PositiveNumber answers `--epochs 0` with "Value 0 not in range 0.000000 to
// 1.79769e+308", CLI11 reads `--seed -1` into a uint64_t as 18446744073709551615, and a list
// read by skipping empty items takes "256,,128" for 256,128. Each check reads the text itself,
// before CLI11 converts it, so no value is clamped or wrapped on the way.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"

namespace minidl::samples {

// An integer in [min, max] written in decimal, nothing else: "expected `what`, got '...'".
template <typename Int>
CLI::Validator integer_in(Int min, Int max, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        Int v{};
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && v >= min && v <= max) return "";
        return "expected " + what + ", got '" + text + "'";
      },
      "", "");
}

// 1, 2, ... up to the type's maximum (epochs, batch sizes, replicas, chunks).
template <typename Int>
CLI::Validator positive_integer() {
  return integer_in<Int>(1, std::numeric_limits<Int>::max(),
                         "a positive integer (1 to " + std::to_string(std::numeric_limits<Int>::max()) + ")");
}

// 0, 1, ... (worker counts, limits, intervals where 0 means "none" or "all").
template <typename Int>
CLI::Validator non_negative_integer() {
  return integer_in<Int>(0, std::numeric_limits<Int>::max(),
                         "an integer from 0 to " + std::to_string(std::numeric_limits<Int>::max()));
}

// A seed: any uint64_t, never a negative number wrapped around.
inline CLI::Validator seed_value() {
  return integer_in<uint64_t>(0, std::numeric_limits<uint64_t>::max(),
                              "an integer from 0 to " + std::to_string(std::numeric_limits<uint64_t>::max()));
}

// A finite number >= 0 (learning rates, momentum, weight decay).
inline CLI::Validator non_negative_real() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = text.empty() ? -1.0 : std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(v) && v >= 0) return "";
        return "expected a finite number >= 0, got '" + text + "'";
      },
      "", "");
}

// "a,b,c" -> {"a", "b", "c"}; "" -> {}. An empty item ("a,,b", "a,", ",a") is an error naming
// the flag: it is a typo far more often than a wish, and skipping it would change the meaning.
inline std::vector<std::string> split_flag_list(const std::string& text, const std::string& flag,
                                                const std::string& example) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    MINIDL_CHECK(!out.back().empty(), flag, ": item ", out.size(), " of '", text,
                 "' is empty; expected a comma-separated list like ", example);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// --hidden: "256,128" -> {256, 128}; "none" or "" -> {} (no hidden layer).
inline std::vector<int64_t> parse_hidden_sizes(const std::string& text, const std::string& flag = "--hidden") {
  std::vector<int64_t> out;
  if (text == "none") return out;
  for (const std::string& item : split_flag_list(text, flag, "256,128 (or none)")) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    MINIDL_CHECK(ec == std::errc() && end == item.data() + item.size() && v > 0, flag,
                 ": expected positive layer sizes like 256,128 (or none); got '", item, "' in '", text, "'");
    out.push_back(v);
  }
  return out;
}

// Parses the command line as CLI11_PARSE does, but a bad flag is one line on stderr,
// "program: --flag: what was expected ...", and exit status 1, as every other error of the
// samples. Returns -1 when the program goes on, else its exit status (0 after --help, which
// CLI11 prints).
inline int parse_flags(CLI::App& app, int argc, char** argv, const std::string& program) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string line;
    for (char c : std::string(e.what())) line += c == '\n' ? ' ' : c;
    std::cerr << program << ": " << line << " (run with --help for the flags)\n";
    return 1;
  }
}

// What a sample's main prints for the exception in flight, as one line "program: message".
// Call it from a `catch (...)` handler: it rethrows and sorts the exception, minidl::Error
// first (its message as it is), then std::bad_alloc (memory ran out while `doing`, e.g.
// "building the model", and `memory_hint`, the flags that would lower the need), then any other
// std::exception, then anything else. An allocator's OutOfMemory (a minidl::Error) reads as
// bad_alloc does, with its own message in parentheses. A message of several lines is joined
// with "; ", so the error is one line on stderr whatever threw it.
inline std::string failure_line(const std::string& program, const std::string& doing = "",
                                const std::string& memory_hint = "") {
  std::string message;
  const std::string while_doing = doing.empty() ? "" : " while " + doing;
  try {
    throw;
  } catch (const OutOfMemory& e) {  // a minidl::Error from an allocator: the same advice as bad_alloc's
    message = "out of memory" + while_doing + " (" + e.what() + ")" + (memory_hint.empty() ? "" : "; " + memory_hint);
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::bad_alloc&) {
    message = "out of memory" + while_doing + " (std::bad_alloc)" + (memory_hint.empty() ? "" : "; " + memory_hint);
  } catch (const std::exception& e) {
    message = std::string("unexpected error") + while_doing + ": " + e.what();
  } catch (...) {
    message = "unexpected error" + while_doing + " (an exception of unknown type)";
  }
  std::string line;
  for (size_t i = 0; i < message.size(); ++i) {
    if (message[i] != '\n') line.push_back(message[i]);
    else if (i + 1 < message.size() && message[i + 1] != '\n') line += "; ";
  }
  const std::string prefix = program + ":";
  return line.rfind(prefix, 0) == 0 ? line : prefix + " " + line;  // the trainers' messages carry the name already
}

}  // namespace minidl::samples
