#include "optim/grad_scaler.h"

#include <cmath>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad::optim {
namespace {

// g *= inv_scale in one pass, returning whether any element is inf or NaN.
template <class T>
bool unscale_and_check(T* g, int64_t n, float inv_scale) {
  // An inf or NaN has an all-ones exponent. OR-ing that test into an integer (instead of
  // `bad |= !std::isfinite(v)`) lets GCC vectorise the loop: on 670k f16 gradients 6.3 -> 1.2 ms,
  // 17% of a mixed-precision MNIST step before.
  uint32_t nonfinite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(load(g[i])) * inv_scale;
    nonfinite |= static_cast<uint32_t>((float_bits(v) & 0x7f800000u) == 0x7f800000u);
    g[i] = store_as<T>(static_cast<compute_t<T>>(v));
  }
  return nonfinite != 0;
}

}  // namespace

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
  for (const Tensor& p : opt.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.device().is_cuda()) {
      // Scale in place, then one scalar back per gradient: the sum of g * 0, which is NaN exactly
      // when some element is inf or NaN and can never overflow (a plain sum of an f16 gradient
      // rounds to inf above 65504).
      native::unary_(UnaryOp::affine, g, {static_cast<double>(inv), 0.0});
      const Tensor poisoned = native::unary(UnaryOp::affine, g, {0.0, 0.0});
      bad |= !std::isfinite(native::reduce(ReduceOp::sum, poisoned, {}, false).item());
      continue;
    }
    RG_CHECK(g.is_contiguous(), "GradScaler", "gradient ", g.desc(), " must be dense");
    dispatch_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      bad |= unscale_and_check(static_cast<T*>(g.raw_data()), g.numel(), inv);
    });
  }
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

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  double total_sq = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = native::cast(g, DType::f64);
    total_sq += native::reduce(ReduceOp::sum, native::binary(BinaryOp::mul, g64, g64), {}, false).item();
  }
  const double norm = std::sqrt(total_sq);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) native::unary_(UnaryOp::affine, g, {coef, 0.0});
    }
  }
  return norm;
}

}  // namespace ringgrad::optim
