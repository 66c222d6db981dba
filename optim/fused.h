// Fused per-tensor optimizer updates: one pass over parameter, gradient and state, instead of a chain
// of tensor ops that would each read and write the whole tensor. The math is in core/optim_math.h,
// shared by the CPU loop (core/cpu/optim.cpp) and the CUDA kernel (core/cuda/optim.cu); fused.cpp
// checks the tensors and calls them through the backend seam (core/native/backend.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/optim_math.h"
#include "core/tensor.h"

namespace ringgrad::optim {

// The hyperparameters of one update (core/optim_math.h), under the optimizers' namespace too.
using ringgrad::AdamHyper;
using ringgrad::SgdHyper;

// param, grad: same shape and dtype, dense, on one device (CPU or CUDA). master/momentum: f32 (f64 for f64 params) or
// undefined.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                const SgdHyper& h);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamHyper& h);

// One optimizer step's updates, added parameter by parameter. CPU parameters are updated when
// added; CUDA ones (backend_batches_updates) are queued and launched by run() as multi-tensor
// kernels, one per group of parameters of one device and dtype (Note [Multi-tensor updates] in
// core/cuda/optim.cu). The queue holds the tensors, so a temporary gradient (a cast) lives until its
// update has launched.
//
//   FusedUpdates updates;
//   for (...) updates.sgd(param, grad, master, momentum, hyper);
//   updates.run();
class FusedUpdates {
 public:
  FusedUpdates() = default;
  // Launches what is still queued when a later parameter threw, so every parameter whose state the
  // optimizer already advanced is updated too (its errors are dropped: a destructor must not throw).
  ~FusedUpdates();
  FusedUpdates(const FusedUpdates&) = delete;
  FusedUpdates& operator=(const FusedUpdates&) = delete;

  void sgd(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum, const SgdHyper& h);
  void adam(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
            const Tensor& exp_avg_sq, const AdamHyper& h);
  // Launches what is queued (nothing to do on a CPU-only step). A parameter queued twice (listed
  // twice in an optimizer) gets its second update in a later launch, never racing with the first.
  void run();

 private:
  struct Queued {
    Tensor param, grad, master, state1, state2;  // state1/2: momentum, or exp_avg / exp_avg_sq
    SgdHyper sgd{};
    AdamHyper adam{};
    bool is_adam = false;
  };
  std::vector<Queued> queued_;
};

// The state dtype for a parameter dtype: f64 stays f64, everything else keeps f32 state.
DType state_dtype(DType param_dtype);
// True when the parameter needs an f32 master copy (f16, bf16).
bool needs_master(DType param_dtype);

}  // namespace ringgrad::optim
