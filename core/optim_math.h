// The per-element math of the fused optimizer updates, written once for both backends (../shared/
// STYLE.md, "One kernel body, two launchers"): core/cpu/optim.cpp loops over these functors on the
// CPU, core/cuda/optim.cu runs them in a grid-stride kernel, so the CPU tests cover the GPU's
// arithmetic. The optimizers (optim/) reach them through the backend seam (optim/fused.cpp).
//
// P is the parameter's storage type (float, double, Half, BFloat16); S the state type (double for
// f64 parameters, float otherwise). `master` is the f32 master copy of an f16/bf16 parameter (null
// for f32/f64, whose parameter is its own master): the update happens on the master and the
// parameter receives it rounded once.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/host_device.h"

namespace ringgrad {

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;  // the momentum buffer starts as the first gradient, as in PyTorch
};

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled_weight_decay;  // AdamW
  int64_t step;                 // 1-based, for bias correction
};

// param -= lr * (momentum-filtered grad + weight_decay * param), PyTorch's SGD.
template <class P, class S>
struct SgdStep {
  P* param;
  const P* grad;
  S* master;  // or null
  S* buf;     // momentum buffer, or null without momentum
  S lr, mom, damp, wd;
  bool nesterov, first_step;

  SgdStep() = default;  // an empty entry of the multi-tensor kernel's list (core/cuda/optim.cu)
  SgdStep(P* p, const P* g, S* m, S* b, const SgdHyper& h)
      : param(p),
        grad(g),
        master(m),
        buf(b),
        lr(S(h.lr)),
        mom(S(h.momentum)),
        damp(S(1 - h.dampening)),
        wd(S(h.weight_decay)),
        nesterov(h.nesterov),
        first_step(h.first_step) {}

  RG_HOST_DEVICE RG_INLINE void operator()(int64_t i) const {
    S x = master ? master[i] : S(load(param[i]));
    S g = S(load(grad[i])) + wd * x;
    if (buf) {
      buf[i] = first_step ? g : mom * buf[i] + damp * g;
      g = nesterov ? g + mom * buf[i] : buf[i];
    }
    x -= lr * g;
    if (master) master[i] = x;
    param[i] = store_as<P>(static_cast<compute_t<P>>(x));
  }
};

// Adam / AdamW with bias correction, PyTorch's formulation:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   x -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// L2 weight decay (Adam) adds wd x to g; decoupled (AdamW) scales x by 1 - lr wd first.
template <class P, class S>
struct AdamStep {
  P* param;
  const P* grad;
  S* master;  // or null
  S* m;
  S* v;
  S b1, b2, eps, step_size, bias2_sqrt, l2, decay;

  AdamStep() = default;
  AdamStep(P* p, const P* g, S* master_, S* m_, S* v_, const AdamHyper& h)
      : param(p),
        grad(g),
        master(master_),
        m(m_),
        v(v_),
        b1(S(h.beta1)),
        b2(S(h.beta2)),
        eps(S(h.eps)),
        step_size(S(h.lr) / S(1 - std::pow(h.beta1, static_cast<double>(h.step)))),
        bias2_sqrt(S(std::sqrt(1 - std::pow(h.beta2, static_cast<double>(h.step))))),
        l2(h.decoupled_weight_decay ? S(0) : S(h.weight_decay)),
        decay(h.decoupled_weight_decay ? S(1 - h.lr * h.weight_decay) : S(1)) {}

  RG_HOST_DEVICE RG_INLINE void operator()(int64_t i) const {
    S x = master ? master[i] : S(load(param[i]));
    const S g = S(load(grad[i])) + l2 * x;
    x *= decay;
    m[i] = b1 * m[i] + (S(1) - b1) * g;
    v[i] = b2 * v[i] + (S(1) - b2) * g * g;
    x -= step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + eps);
    if (master) master[i] = x;
    param[i] = store_as<P>(static_cast<compute_t<P>>(x));
  }
};

// Calls fn(P{}, S{}) for a parameter dtype: the storage type and the state type above.
template <class Fn>
void dispatch_param(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{}, float{});
    case DType::f64: return fn(double{}, double{});
    case DType::f16: return fn(Half{}, float{});
    case DType::bf16: return fn(BFloat16{}, float{});
    default: RG_FAIL("optimizer", "parameters must be floating-point, got ", dtype_name(t));
  }
}

}  // namespace ringgrad
