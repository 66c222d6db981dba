// Fused per-tensor optimizer updates: one pass over parameter, gradient and state, instead of a chain
// of tensor ops that would each read and write the whole tensor.
//
// P is the parameter's storage type (float, double, Half, BFloat16); S the state type (double for f64
// parameters, float otherwise). `master` is the f32 master copy for f16/bf16 parameters (null for
// f32/f64, whose parameter is its own master): the update happens on the master and the parameter
// receives it rounded.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ringgrad::optim {

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

// param, grad: same shape and dtype, dense, on the CPU. master/momentum: f32 (f64 for f64 params) or
// undefined.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                const SgdHyper& h);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamHyper& h);

// The state dtype for a parameter dtype: f64 stays f64, everything else keeps f32 state.
DType state_dtype(DType param_dtype);
// True when the parameter needs an f32 master copy (f16, bf16).
bool needs_master(DType param_dtype);

}  // namespace ringgrad::optim
