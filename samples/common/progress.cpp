// Progress: the bar and the printed lines.
#include "samples/common/progress.h"

#include <cstdio>
#include <ostream>

namespace minidl::samples {

namespace {
constexpr int kBarWidth = 24;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);  // at most ~10 redraws a second
}  // namespace

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

void Progress::begin(std::string label, int64_t first, int64_t total) {
  label_ = std::move(label);
  first_ = first;
  total_ = total;
  start_ = last_draw_ = Clock::now();
}

void Progress::update(int64_t done, double running_loss, int64_t examples) {
  if (style_ != ProgressStyle::Bar) return;
  const auto now = Clock::now();
  if (drawn_ && now - last_draw_ < kRedrawInterval && done < total_) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int64_t run = done - first_;  // steps this process ran in this phase
  const double per_step = run > 0 ? elapsed / static_cast<double>(run) : 0.0;
  const int filled = total_ > 0 ? static_cast<int>(kBarWidth * done / total_) : kBarWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  char speed[64];
  if (examples > 0) std::snprintf(speed, sizeof speed, "%.0f samples/s", elapsed > 0 ? examples / elapsed : 0.0);
  else std::snprintf(speed, sizeof speed, "%.1f ms/step", 1000.0 * per_step);
  char line[320];
  std::snprintf(line, sizeof line, "\r%s [%s] %lld/%lld  loss %.4f  %s  %s left ", label_.c_str(), bar.c_str(),
                static_cast<long long>(done), static_cast<long long>(total_), running_loss, speed,
                format_duration(per_step * static_cast<double>(total_ - done)).c_str());
  out_ << line << std::flush;
  drawn_ = true;
}

void Progress::print(const std::string& line) {
  if (style_ == ProgressStyle::Quiet) return;
  if (drawn_) out_ << "\r\033[K";  // erase the bar line
  drawn_ = false;
  out_ << line << "\n" << std::flush;
}

}  // namespace minidl::samples
