// Learning-rate schedules: lr as a function of the optimizer step (0-based). apply() sets it on every
// parameter group. Call once per step, before opt.step().
#pragma once

#include <cmath>

#include "optim/optimizer.h"

namespace ringgrad::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double at(int64_t step) const = 0;
  void apply(Optimizer& opt, int64_t step) const { opt.set_lr(at(step)); }
};

class ConstantLR : public LRSchedule {
 public:
  explicit ConstantLR(double lr) : lr_(lr) {}
  double at(int64_t) const override { return lr_; }

 private:
  double lr_;
};

// lr * gamma^(step / step_size)
class StepLR : public LRSchedule {
 public:
  StepLR(double lr, int64_t step_size, double gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {}
  double at(int64_t step) const override { return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_)); }

 private:
  double lr_;
  int64_t step_size_;
  double gamma_;
};

// Linear warm-up from 0 to peak over `warmup` steps, then cosine decay to min_lr at `total` steps,
// then min_lr (the GPT-2 / nanoGPT schedule).
class WarmupCosineLR : public LRSchedule {
 public:
  WarmupCosineLR(double peak, int64_t warmup, int64_t total, double min_lr)
      : peak_(peak), warmup_(warmup), total_(total), min_(min_lr) {}
  double at(int64_t step) const override {
    if (step < warmup_) return peak_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
    if (step >= total_) return min_;
    const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
    return min_ + 0.5 * (1.0 + std::cos(M_PI * progress)) * (peak_ - min_);
  }

 private:
  double peak_;
  int64_t warmup_, total_;
  double min_;
};

}  // namespace ringgrad::optim
