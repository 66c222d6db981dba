#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "optim/device_sums.h"

namespace ringgrad::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  RG_CHECK(options.init_scale > 0 && options.growth_factor > 1 && options.backoff_factor > 0 &&
               options.backoff_factor < 1 && options.growth_interval > 0,
           "GradScaler", "invalid options: scale ", options.init_scale, ", growth ", options.growth_factor,
           ", backoff ", options.backoff_factor, ", interval ", options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? loss * scale_ : loss; }

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled || unscaled_) return;
  NoGradGuard no_grad;
  bool bad = false;
  const float inv = static_cast<float>(1.0 / scale_);
  // Devices without the fused kernel: per device, the sum over its gradients of sum(g * 0), which is
  // NaN exactly when some element is inf or NaN and can never overflow (a plain sum of an f16
  // gradient rounds to inf above 65504). Summed on the device, in f32, and read back once per device.
  DeviceSums poisoned_sums;
  for (Tensor g : opt.step_gradients()) {
    if (!native::backend_has_unscale_and_check(g.device())) {
      native::unary_(UnaryOp::affine, g, {static_cast<double>(inv), 0.0});
      const Tensor poisoned = native::unary(UnaryOp::affine, g, {0.0, 0.0});
      add_on_device(poisoned_sums, native::cast(native::reduce(RowReduction::sum, poisoned, {}, false), DType::f32));
      continue;
    }
    // One pass that scales and checks (unscale_and_check in core/kernels.h).
    RG_CHECK(g.is_contiguous(), "GradScaler", "gradient ", g.desc(), " must be dense");
    bad |= native::backend_unscale_and_check(g.device(), g.dtype(), g.raw_data(), g.numel(), inv);
  }
  for (const auto& [device, sum] : poisoned_sums) bad |= !std::isfinite(sum.item());
  bad = opt.agree_on_found_inf(bad);  // a sharded optimizer's ranks each checked their shard
  found_inf_ = reducer_ ? reducer_(bad) : bad;
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  unscale_(opt);
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  RG_CHECK(unscaled_, "GradScaler", "update() called without step()/unscale_() in this iteration");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

nn::StateDict GradScaler::state_dict() const {
  return {{"scale", scalar_tensor(scale_, {.dtype = DType::f64})},
          {"growth_tracker", scalar_tensor(static_cast<double>(growth_tracker_), {.dtype = DType::f64})}};
}

void GradScaler::load_state_dict(const nn::StateDict& state) {
  const double scale = find_state(state, "scale", "GradScaler", {}).item();
  (void)find_state(state, "growth_tracker", "GradScaler", {});  // names the entry when it is missing
  const int64_t growth = state_int(state, "growth_tracker", "GradScaler");
  RG_CHECK(scale > 0 && std::isfinite(scale) && growth >= 0, "GradScaler", "state holds scale ", scale,
           " and growth_tracker ", growth, "; need a positive finite scale and a count >= 0");
  set_state(scale, growth);
}

}  // namespace ringgrad::optim
