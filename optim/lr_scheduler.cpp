// LR schedules: the shared epoch bookkeeping and the two closed forms.
#include "optim/lr_scheduler.h"

#include <cmath>
#include <numbers>

namespace minidl::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.lr);
  last_lr_ = base_lrs_;
}

void LRScheduler::step() {
  ++epoch_;
  auto& groups = optimizer_.param_groups();
  MINIDL_CHECK(groups.size() == base_lrs_.size(), "LRScheduler: the optimizer had ", base_lrs_.size(),
               " param groups when the scheduler was made and has ", groups.size(), " now");
  last_lr_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = lr_at(epoch_, base_lrs_[g]);
    last_lr_.push_back(groups[g].lr);
  }
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MINIDL_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  MINIDL_CHECK(gamma >= 0, "StepLR: gamma must be >= 0, got ", gamma);
}

double StepLR::lr_at(int64_t t, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(t / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  MINIDL_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
  MINIDL_CHECK(eta_min >= 0, "CosineAnnealingLR: eta_min must be >= 0, got ", eta_min);
}

double CosineAnnealingLR::lr_at(int64_t t, double base_lr) const {
  const double phase = std::numbers::pi * static_cast<double>(t) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(phase)) / 2.0;
}

}  // namespace minidl::optim
