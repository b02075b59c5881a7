// LR schedules: the shared step bookkeeping and the closed forms.
#include "optim/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <sstream>

namespace minidl::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const auto& group : optimizer_.param_groups()) base_lrs_.push_back(group.lr);
  last_lr_ = base_lrs_;
}

void LRScheduler::step() {
  ++epoch_;
  apply_lrs();
}

void LRScheduler::apply_lrs() {
  auto& groups = optimizer_.param_groups();
  MINIDL_CHECK(groups.size() == base_lrs_.size(), "LRScheduler: the optimizer had ", base_lrs_.size(),
               " param groups when the scheduler was made and has ", groups.size(), " now");
  last_lr_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = lr_at(epoch_, base_lrs_[g]);
    last_lr_.push_back(groups[g].lr);
  }
}

LRSchedulerState LRScheduler::state() const {
  return LRSchedulerState{name(), epoch_, base_lrs_, last_lr_, hyperparameters()};
}

void LRScheduler::load_state(const LRSchedulerState& s) {
  std::vector<std::string> problems;
  if (s.scheduler != name()) problems.push_back("the state was written by " + s.scheduler);
  if (s.hyperparameters != hyperparameters()) {
    std::ostringstream os;
    os << "hyperparameters differ: the state has";
    for (const auto& [k, v] : s.hyperparameters) os << " " << k << "=" << v;
    os << ", this scheduler has";
    for (const auto& [k, v] : hyperparameters()) os << " " << k << "=" << v;
    problems.push_back(os.str());
  }
  const size_t groups = optimizer_.param_groups().size();
  if (s.base_lrs.size() != groups || s.last_lr.size() != groups) {
    problems.push_back(detail::make_message("the state has ", s.base_lrs.size(), " base lr(s) and ", s.last_lr.size(),
                                            " last lr(s), the optimizer has ", groups, " param group(s)"));
  }
  if (s.last_epoch < 0) problems.push_back(detail::make_message("last_epoch is negative (", s.last_epoch, ")"));
  if (!problems.empty()) {
    std::ostringstream os;
    os << name() << ": load_state failed (nothing was loaded): ";
    for (size_t i = 0; i < problems.size(); ++i) os << (i ? "; " : "") << problems[i];
    throw Error(os.str());
  }
  epoch_ = s.last_epoch;
  base_lrs_ = s.base_lrs;
  last_lr_ = s.last_lr;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MINIDL_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  MINIDL_CHECK(gamma >= 0, "StepLR: gamma must be >= 0, got ", gamma);
}

double StepLR::lr_at(int64_t t, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(t / step_size_));
}

std::map<std::string, double> StepLR::hyperparameters() const {
  return {{"step_size", static_cast<double>(step_size_)}, {"gamma", gamma_}};
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

std::map<std::string, double> CosineAnnealingLR::hyperparameters() const {
  return {{"t_max", static_cast<double>(t_max_)}, {"eta_min", eta_min_}};
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_iters, int64_t lr_decay_iters,
                               double min_lr_ratio)
    : LRScheduler(optimizer),
      warmup_iters_(warmup_iters),
      lr_decay_iters_(lr_decay_iters),
      min_lr_ratio_(min_lr_ratio) {
  MINIDL_CHECK(warmup_iters >= 0, "WarmupCosineLR: warmup_iters must be >= 0, got ", warmup_iters);
  MINIDL_CHECK(lr_decay_iters > warmup_iters, "WarmupCosineLR: lr_decay_iters must be greater than warmup_iters, got ",
               "lr_decay_iters ", lr_decay_iters, " and warmup_iters ", warmup_iters);
  MINIDL_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "WarmupCosineLR: min_lr_ratio must be in [0, 1] (a minimum lr ",
               "of at most the base lr), got ", min_lr_ratio);
  apply_lrs();  // t = 0 is already in the warm-up: lr(0) = base / (W + 1)
}

double WarmupCosineLR::lr_at(int64_t t, double base_lr) const {
  const double min_lr = min_lr_ratio_ * base_lr;
  if (t < warmup_iters_) {
    return base_lr * static_cast<double>(t + 1) / static_cast<double>(warmup_iters_ + 1);
  }
  if (t > lr_decay_iters_) return min_lr;
  const double decay_ratio =
      static_cast<double>(t - warmup_iters_) / static_cast<double>(lr_decay_iters_ - warmup_iters_);  // 0..1
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * decay_ratio));                       // 1..0
  return min_lr + coeff * (base_lr - min_lr);
}

std::map<std::string, double> WarmupCosineLR::hyperparameters() const {
  return {{"warmup_iters", static_cast<double>(warmup_iters_)},
          {"lr_decay_iters", static_cast<double>(lr_decay_iters_)},
          {"min_lr_ratio", min_lr_ratio_}};
}

}  // namespace minidl::optim
