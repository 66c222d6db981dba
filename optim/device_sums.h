// Per-device sums of scalars, for reductions over many gradients that must read back once per
// device (internal to optim/: GradScaler's fallback check and clip_grad_norm).
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "core/native/native.h"

namespace ringgrad::optim {

// Scalars summed on their own device, one sum per device in order of first appearance, so that
// each device is read back once (one host synchronisation per step on a GPU, not one per tensor).
using DeviceSums = std::vector<std::pair<Device, Tensor>>;

inline void add_on_device(DeviceSums& sums, const Tensor& value) {
  auto at = std::find_if(sums.begin(), sums.end(), [&](const auto& s) { return s.first == value.device(); });
  if (at == sums.end()) sums.emplace_back(value.device(), value);
  else at->second = native::binary(BinaryOp::add, at->second, value);
}

}  // namespace ringgrad::optim
