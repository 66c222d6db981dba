#include "autograd/accumulate_grad.h"

#include "core/native/native.h"

namespace ringgrad::autograd {

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor incoming = std::move(grads[0]);
  if (!incoming.defined()) return {};
  Tensor leaf(leaf_);
  AutogradMeta& meta = autograd_meta(leaf);
  RG_CHECK(incoming.shape() == leaf.shape(), "backward", "gradient ", incoming.desc(),
           " does not match the shape of the leaf ", leaf.desc());
  if (meta.grad.defined()) {
    // In place, so a .grad that is a view into caller-owned storage (a DDP bucket) stays that view.
    native::binary_(BinaryOp::add, meta.grad, incoming.dtype() == leaf.dtype() ? incoming
                                                     : native::cast(incoming, leaf.dtype()));
  } else {
    // Take the incoming buffer when nobody else can see it; otherwise copy, since another node may
    // hold the same tensor (add's backward passes one gradient to both inputs) and a later in-place
    // accumulation must not write into it.
    const bool exclusive = incoming.impl_ptr().use_count() == 1 && incoming.storage().use_count() == 1 &&
                           incoming.is_contiguous() && incoming.dtype() == leaf.dtype();
    meta.grad = exclusive ? incoming : native::cast(incoming, leaf.dtype());
  }
  const auto hooks = meta.post_accumulate_grad_hooks;  // a hook may register or remove hooks
  for (const auto& [handle, hook] : hooks) hook(leaf);
  return {};
}

}  // namespace ringgrad::autograd
