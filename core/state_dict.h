// StateDict: named tensors, the unit of saved state -- of modules, optimizers, the gradient scaler,
// samplers and loaders -- and of checkpoint files (nn/checkpoint.h). In core, so that every layer that
// has state (data/ included, which sits beside nn/) can speak it; nn/state_dict.h names it nn::StateDict.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ringgrad {

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

// The entry `name` of `state` (an error naming `who` and the key when it is missing).
const Tensor& state_entry(const StateDict& state, const std::string& name, const std::string& who);
// The entry as an exact integer: a 0-dim integer tensor, or a floating one holding an integer value.
int64_t state_int(const StateDict& state, const std::string& name, const std::string& who);
// Entries of `state` whose names start with `prefix`, with the prefix removed.
StateDict with_prefix_removed(const StateDict& state, const std::string& prefix);
// `entries` with `prefix` prepended to each name.
StateDict with_prefix(const StateDict& entries, const std::string& prefix);

}  // namespace ringgrad
