// A trainer's progress for people: on a terminal a bar redrawn in place with '\r' at most ten
// times a second (steps done / total, running loss, speed, time left); elsewhere only the lines
// the trainer prints (an evaluation, an epoch's summary). One phase at a time: an epoch of
// batches, or a whole run of iterations.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace minidl::samples {

enum class ProgressStyle {
  Bar,    // a bar redrawn in place with '\r' (for a terminal)
  Lines,  // the trainer's lines only (for logs and pipes)
  Quiet,  // nothing but errors
};

class Progress {
 public:
  Progress(std::ostream& out, ProgressStyle style) : out_(out), style_(style) {}

  // A new phase named `label` ("epoch 2/10", "iter") of steps [first, total), `first` already done.
  void begin(std::string label, int64_t first, int64_t total);
  // After each step: steps of the phase done, the running loss, examples trained this phase
  // (0: unknown, the bar then shows ms per step).
  void update(int64_t done, double running_loss, int64_t examples = 0);
  // Clears the bar and prints `line` on a line of its own (every style but Quiet).
  void print(const std::string& line);

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream& out_;
  ProgressStyle style_;
  std::string label_;
  int64_t first_ = 0, total_ = 0;
  Clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

// "1:05" / "1:02:03": a duration for people.
std::string format_duration(double seconds);

}  // namespace minidl::samples
