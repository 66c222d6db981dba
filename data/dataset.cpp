#include "data/dataset.h"

#include "autograd/engine.h"
#include "core/ops.h"

namespace ringgrad::data {

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  RG_CHECK(!indices.empty(), "Dataset::get_batch", "empty batch");
  std::vector<Tensor> inputs, targets;
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  NoGradGuard no_grad;
  return {stack(inputs), stack(targets)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  RG_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.size(0) == targets_.size(0), "TensorDataset", "inputs ",
           inputs_.desc(), " and targets ", targets_.desc(), " need the same first dimension");
}

Example TensorDataset::get(int64_t index) const {
  RG_CHECK(index >= 0 && index < size(), "TensorDataset", "index ", index, " out of range [0, ", size(), ")");
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  NoGradGuard no_grad;
  Tensor idx = from_vector(indices, {static_cast<int64_t>(indices.size())});
  return {index_select(inputs_, 0, idx), index_select(targets_, 0, idx)};
}

}  // namespace ringgrad::data
