// Exercise: in which order does backward make the gradients ready? (docs/learn/02-hooks.md)
#pragma once

#include <string>
#include <vector>

#include "nn/nn.h"

namespace learn {

// Runs one backward of cross_entropy(model(x), y) and returns the names of model's parameters in
// the order their gradients became ready: the order in which the hooks DDP relies on fire.
std::vector<std::string> record_hook_order(ringgrad::nn::Module& model, const ringgrad::Tensor& x,
                                           const ringgrad::Tensor& y);

}  // namespace learn
