// AccumulateGrad: the node at the end of every path to a leaf. It adds the incoming gradient into the
// leaf's .grad and then fires the leaf's post-accumulate-grad hooks (see the contract in
// autograd/engine.h).
#pragma once

#include "autograd/node.h"

namespace ringgrad::autograd {

class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) { runs_first = true; }
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

}  // namespace ringgrad::autograd
