// --profile FILE and --profile-steps N for a trainer: the profiler (core/profiler.h) records N
// training steps after a few unrecorded warm-up steps (the first steps fill the allocator's
// caches and the CUDA context, and would stand out in the table for that alone), then the
// table is printed and the Chrome trace written. The trainer calls step_done() after each
// training step; the recording starts right after the last warm-up step, so the DataLoader's
// fetch of each recorded step's batch falls inside it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "core/profiler.h"

namespace minidl::samples {

struct ProfileOptions {
  std::string trace;            // the Chrome trace's path; empty: no profiling
  int64_t steps = 20;           // steps recorded
  int64_t warmup = 5;           // steps run before the recording starts
  size_t rows = 25;             // table rows printed (0: all)
  bool group_by_shape = false;  // a table row per op and input shapes (Profile::key_averages)
};

class ProfileWindow {
 public:
  // Nothing happens when options.trace is empty. `out` receives the table.
  ProfileWindow(ProfileOptions options, std::ostream& out);
  ~ProfileWindow();
  ProfileWindow(const ProfileWindow&) = delete;
  ProfileWindow& operator=(const ProfileWindow&) = delete;

  // After every training step: counts it, starts the recording after the warm-up, and ends
  // it (table, trace) after options.steps recorded steps.
  void step_done();
  // The run ends: a recording still running stops and reports the steps it has (saying they
  // are fewer than asked); without any recorded step it says so. Idempotent.
  void finish();
  bool enabled() const { return !options_.trace.empty(); }

 private:
  void report();
  ProfileOptions options_;
  std::ostream& out_;
  std::unique_ptr<profiler::Profiler> profiler_;
  int64_t done_ = 0;
  bool finished_ = false;
};

}  // namespace minidl::samples
