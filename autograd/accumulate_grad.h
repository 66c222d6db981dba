// AccumulateGrad: the node at the end of every path to a leaf. It adds the incoming gradient into the
// leaf's .grad and then fires the leaf's post-accumulate-grad hooks (see the contract in
// autograd/engine.h).
//
// Note [Gradient destinations]: DDP wants every parameter's gradient to live in its bucket (one
// contiguous buffer per bucket, reduced in one collective). When .grad is empty -- after
// zero_grad(set_to_none = true), the default -- the backward allocates a fresh gradient and .grad
// becomes that tensor, so DDP had to copy every gradient into its bucket: a full extra pass over
// the model's gradients each step (~3.5% of a W1 step on 2 ranks). Instead a leaf may carry a
// destination (set_grad_destination, autograd/engine.h). A backward lambda that computes the leaf's
// whole gradient in one kernel -- linear's dW = dy^T x is a GEMM with an output argument -- asks
// NeedsGrad::destination and writes straight into it; AccumulateGrad recognises the destination and
// makes it .grad, with no copy. The destination is offered only when
//   * .grad is empty (otherwise the gradient is added to .grad in place, as always),
//   * it matches the gradient's shape, dtype and device exactly and is contiguous, and
//   * no other node has taken it in this backward: a leaf used twice (a tied embedding and head)
//     gets two contributions, which the engine sums out of place; only one may be written into
//     the destination, and the sum then reaches AccumulateGrad as an ordinary tensor.
// Writing into the destination overwrites what it held; a caller who keeps a previous .grad that
// is the destination sees it change (as with PyTorch's gradient_as_bucket_view).
#pragma once

#include "autograd/node.h"

namespace ringgrad::autograd {

class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) { runs_first = true; }
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  // The leaf's destination if a producer may write this backward's gradient into it, else an
  // undefined tensor. See Note [Gradient destinations].
  Tensor claim_destination(const Shape& shape, DType dtype, Device device);

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

}  // namespace ringgrad::autograd
