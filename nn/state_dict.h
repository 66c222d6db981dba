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

// What a load_state_dict matched: the keys the receiver has that the state lacks (missing), the
// keys of the state the receiver has not (unexpected), and, for error messages, the keys whose
// shapes differ (mismatched). With strict = true a load that returns has all three empty.
struct LoadResult {
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  std::vector<std::string> mismatched;  // "name: checkpoint (a, b) vs model (c, d)"

  bool all_matched() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // One line per non-empty list, e.g. "missing keys: fc2.weight, fc2.bias"; empty when all matched.
  std::string describe() const;
};

}  // namespace ringgrad::nn
