// Learning-rate schedules. Each remembers every group's lr at construction (base_lr) and
// step() advances its step counter t and writes lr(t) into every group, in closed form:
//   StepLR:            lr = base · γ^floor(t / step_size)
//   CosineAnnealingLR: lr = η_min + (base - η_min) · (1 + cos(π·t / T_max)) / 2
//   WarmupCosineLR:    nanoGPT's get_lr, per group with min = min_lr_ratio · base, W = warmup_iters,
//                      D = lr_decay_iters:
//                        t < W       lr = base · (t + 1) / (W + 1)                 linear warm-up
//                        W <= t <= D lr = min + (base - min) · (1 + cos(π·(t - W) / (D - W))) / 2
//                        t > D       lr = min
// StepLR and CosineAnnealingLR leave the lrs as they are at construction (t = 0 gives base_lr);
// WarmupCosineLR writes lr(0), the first warm-up lr. So in the loop
//   optimizer.step(); scheduler.step();
// the optimizer's k-th step (k = 0, 1, ...) uses lr(k), as nanoGPT's iteration k does.
// A scheduler keeps a reference to its optimizer, which must outlive it. state()/load_state()
// carry the step counter and lrs through a checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace minidl::optim {

// A scheduler's position in checkpoint form.
struct LRSchedulerState {
  std::string scheduler;                          // "StepLR", "CosineAnnealingLR", "WarmupCosineLR"
  int64_t last_epoch = 0;                         // steps taken (t)
  std::vector<double> base_lrs, last_lr;          // one per param group
  std::map<std::string, double> hyperparameters;  // step_size and gamma, t_max and eta_min, or
                                                  // warmup_iters, lr_decay_iters and min_lr_ratio
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // t += 1, then every group's lr = lr_at(t, its base lr).
  void step();
  // The lrs the last step (or the constructor) wrote, one per group.
  std::vector<double> last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  virtual std::string name() const = 0;

  LRSchedulerState state() const;
  // Continues from `s`: its epoch counter, base and last lrs. Refuses (changing nothing) a state
  // of another scheduler, with other hyperparameters, or another number of param groups. The
  // groups' lrs themselves come back with the optimizer's state (Optimizer::load_state_dict).
  void load_state(const LRSchedulerState& s);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  virtual double lr_at(int64_t t, double base_lr) const = 0;
  virtual std::map<std::string, double> hyperparameters() const = 0;
  // Every group's lr = lr_at(t, its base lr), for the current t; step() ends with it, and a
  // schedule whose lr(0) is not base_lr calls it from its constructor.
  void apply_lrs();

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t epoch_ = 0;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  double lr_at(int64_t t, double base_lr) const override;
  std::map<std::string, double> hyperparameters() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  double lr_at(int64_t t, double base_lr) const override;
  std::map<std::string, double> hyperparameters() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// nanoGPT's schedule (see the top of this file), stepped once per iteration. Each group's minimum
// is min_lr_ratio times its own base lr, so every group follows the same curve scaled to its lr
// (nanoGPT's min_lr = learning_rate / 10 is min_lr_ratio 0.1). warmup_iters = 0 starts at base_lr.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_iters, int64_t lr_decay_iters, double min_lr_ratio = 0.1);
  std::string name() const override { return "WarmupCosineLR"; }

 protected:
  double lr_at(int64_t t, double base_lr) const override;
  std::map<std::string, double> hyperparameters() const override;

 private:
  int64_t warmup_iters_;
  int64_t lr_decay_iters_;
  double min_lr_ratio_;
};

}  // namespace minidl::optim
