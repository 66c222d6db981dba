// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_).
//
//   loss.backward();              // under DDP: the gradients are already averaged, so every rank
//   scaler.unscale_(opt);         // computes the same norm and clips alike (unscale first under a
//   optim::clip_grad_norm(model->parameters(), 1.0);   // GradScaler: clip the true gradients)
//   opt.step();
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ringgrad::optim {

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before clipping
// (computed in double). Parameters without a gradient are skipped.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ringgrad::optim
