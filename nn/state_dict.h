// nn::StateDict: named tensors, the unit of module and optimizer state and of checkpoints
// (nn/checkpoint.h). A header of its own so that code which only passes state around (the optimizers)
// need not include nn::Module.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::nn {

// An ordered list of (name, tensor). Module::state_dict: parameters first, then buffers, in
// registration order.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

}  // namespace ringgrad::nn
