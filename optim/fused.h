// Fused per-tensor optimizer updates: one pass over parameter, gradient and state, instead of a chain
// of tensor ops that would each read and write the whole tensor. The math is in optim/fused_math.h,
// shared by the CPU loop (fused.cpp) and the CUDA kernel (core/cuda/optim.cu).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "optim/fused_math.h"

namespace ringgrad::optim {

// param, grad: same shape and dtype, dense, on one device (CPU or CUDA). master/momentum: f32 (f64 for f64 params) or
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
