// EpochProgress: the bar and the summary line.
#include "samples/fashion_mnist/progress.h"

#include <cstdio>
#include <ostream>

namespace minidl::fashion_mnist {

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

EpochProgress::EpochProgress(std::ostream& out, ProgressStyle style, int64_t epoch, int64_t epochs,
                             int64_t first_batch, int64_t total_batches)
    : out_(out), style_(style), epoch_(epoch), epochs_(epochs), first_batch_(first_batch), total_(total_batches),
      start_(Clock::now()), last_draw_(start_) {}

void EpochProgress::update(int64_t batches_done, double running_loss, int64_t samples) {
  if (style_ != ProgressStyle::Bar) return;
  const auto now = Clock::now();
  if (drawn_ && now - last_draw_ < kRedrawInterval && batches_done < total_) return;
  last_draw_ = now;
  draw(batches_done, running_loss, samples);
}

void EpochProgress::draw(int64_t batches_done, double running_loss, int64_t samples) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const int64_t run = batches_done - first_batch_;  // batches this process ran this epoch
  const double per_batch = run > 0 ? elapsed / static_cast<double>(run) : 0.0;
  const double left = per_batch * static_cast<double>(total_ - batches_done);
  const int filled = total_ > 0 ? static_cast<int>(kBarWidth * batches_done / total_) : kBarWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  char line[256];
  std::snprintf(line, sizeof line, "\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  %s left ",
                static_cast<long long>(epoch_), static_cast<long long>(epochs_), bar.c_str(),
                static_cast<long long>(batches_done), static_cast<long long>(total_), running_loss,
                elapsed > 0 ? static_cast<double>(samples) / elapsed : 0.0, format_duration(left).c_str());
  out_ << line << std::flush;
  drawn_ = true;
}

void EpochProgress::finish(const std::string& summary) {
  if (style_ == ProgressStyle::Quiet) return;
  if (drawn_) out_ << "\r\033[K";  // erase the bar line
  out_ << summary << "\n" << std::flush;
}

}  // namespace minidl::fashion_mnist
