// ProfileWindow: --profile for the sample trainers (profile_window.h).
#include "samples/common/profile_window.h"

#include <ostream>
#include <utility>

#include "core/error.h"

namespace minidl::samples {

ProfileWindow::ProfileWindow(ProfileOptions options, std::ostream& out) : options_(std::move(options)), out_(out) {
  MINIDL_CHECK(options_.steps > 0, "--profile-steps must be positive, got ", options_.steps);
  MINIDL_CHECK(options_.warmup >= 0, "the profiler's warm-up must be >= 0 steps, got ", options_.warmup);
  if (enabled() && options_.warmup == 0) {
    profiler_ = std::make_unique<profiler::Profiler>();
    profiler_->start();
  }
}

ProfileWindow::~ProfileWindow() = default;  // a recording still running is dropped by ~Profiler

void ProfileWindow::step_done() {
  if (!enabled() || finished_) return;
  ++done_;
  if (profiler_) profiler::step();
  if (done_ == options_.warmup && !profiler_) {
    profiler_ = std::make_unique<profiler::Profiler>();
    profiler_->start();
  } else if (done_ == options_.warmup + options_.steps) {
    report();
  }
}

void ProfileWindow::finish() {
  if (!enabled() || finished_) return;
  if (!profiler_) {
    finished_ = true;
    out_ << "profile: the run ended after " << done_ << " steps, before the " << options_.warmup
         << " warm-up steps were over; nothing recorded, " << options_.trace << " not written\n";
    return;
  }
  report();
}

void ProfileWindow::report() {
  finished_ = true;
  const profiler::Profile p = profiler_->stop();
  profiler_.reset();
  out_ << "profile of " << p.steps() << " training steps";
  if (p.steps() < options_.steps) out_ << " (the run ended before the " << options_.steps << " asked for)";
  out_ << ", after " << options_.warmup << " unrecorded warm-up steps:\n" << p.table(options_.rows, options_.group_by_shape);
  p.write_chrome_trace(options_.trace);
  out_ << "trace: " << options_.trace << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
}

}  // namespace minidl::samples
