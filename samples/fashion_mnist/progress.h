// The trainer's per-epoch progress: on a terminal a bar redrawn in place with '\r' at most ten
// times a second (batches done / total, running loss, samples/s, time left); elsewhere nothing
// until the epoch's one plain summary line.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "samples/fashion_mnist/trainer.h"

namespace minidl::fashion_mnist {

class EpochProgress {
 public:
  // The epoch runs batches [first_batch, total_batches) of a 1-based `epoch` of `epochs`.
  EpochProgress(std::ostream& out, ProgressStyle style, int64_t epoch, int64_t epochs, int64_t first_batch,
                int64_t total_batches);
  // After each batch: how many of the epoch's batches are done, the running mean loss and the
  // samples trained in this process so far this epoch.
  void update(int64_t batches_done, double running_loss, int64_t samples);
  // Clears the bar and prints the epoch's summary line (every style but Quiet).
  void finish(const std::string& summary);

 private:
  using Clock = std::chrono::steady_clock;
  void draw(int64_t batches_done, double running_loss, int64_t samples);
  std::ostream& out_;
  ProgressStyle style_;
  int64_t epoch_, epochs_, first_batch_, total_;
  Clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

// "1:05" / "1:02:03": a duration for people.
std::string format_duration(double seconds);

}  // namespace minidl::fashion_mnist
