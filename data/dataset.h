// Datasets: random access to (input, target) examples.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::data {

struct Example {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, stacked along a new first dim. The default stacks get(i); datasets
  // backed by big tensors override it with one gather.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Examples are rows of two tensors with the same first dimension.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
};

}  // namespace ringgrad::data
