// GradScaler: dynamic loss scaling for f16 training (torch.cuda.amp.GradScaler's algorithm).
//
// f16 gradients underflow to zero below 2^-24; multiplying the loss by a large scale S keeps them
// representable. Before the optimizer step the gradients are divided by S again (unscale_), and if
// any of them is inf or NaN the scale was too large: the step is skipped and S is halved. After
// growth_interval consecutive good steps, S doubles.
//
//   Tensor loss = ...;
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);              // optional: before clip_grad_norm
//   clip_grad_norm(params, 1.0);      // optim/clip_grad.h
//   scaler.step(opt);                  // skips the step on inf/NaN
//   scaler.update();
//
// Distributed seam: with data parallelism every rank must make the same skip decision, or the
// replicas diverge. set_found_inf_reducer installs a function that combines the local flag across
// ranks (a MAX allreduce); the distributed module installs it.
#pragma once

#include <functional>

#include "optim/optimizer.h"

namespace ringgrad::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // a disabled scaler passes everything through (fp32 runs use the same code)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  Tensor scale(const Tensor& loss) const;  // loss * scale
  // Divides every gradient of `opt` by the scale (once per step) and records whether any is inf/NaN.
  void unscale_(Optimizer& opt);
  // Unscales if needed, then steps unless a gradient was inf/NaN. Returns whether it stepped.
  bool step(Optimizer& opt);
  // Adjusts the scale after step(): backoff on inf/NaN, growth after growth_interval good steps.
  void update();

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  int64_t growth_tracker() const { return growth_tracker_; }
  void set_found_inf_reducer(std::function<bool(bool)> reducer) { reducer_ = std::move(reducer); }
  // A rank with no gradients of its own (out of data under dist::Join) answers the other ranks'
  // found-inf agreement with "no overflow", so that their unscale_ completes.
  void shadow_found_inf() {
    if (options_.enabled && reducer_) reducer_(false);  // a disabled scaler agrees on nothing
  }

  // For checkpoints: {"scale", "growth_tracker"} as 0-dim f64 tensors, and back (an error names a
  // missing or non-scalar entry). set_state sets the two values directly.
  nn::StateDict state_dict() const;
  void load_state_dict(const nn::StateDict& state);
  void set_state(double scale, int64_t growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
  std::function<bool(bool)> reducer_;
};

}  // namespace ringgrad::optim
