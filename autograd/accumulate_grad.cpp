#include "autograd/accumulate_grad.h"

#include "autograd/engine.h"
#include "core/native/native.h"

namespace ringgrad::autograd {
namespace {

bool same_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

}  // namespace

Tensor AccumulateGrad::claim_destination(const Shape& shape, DType dtype, Device device) {
  Tensor leaf(leaf_);
  const AutogradMeta& meta = autograd_meta(leaf);
  const Tensor& d = meta.grad_destination;
  if (!d.defined() || meta.grad.defined()) return {};
  if (d.shape() != shape || d.dtype() != dtype || d.device() != device || !d.is_contiguous()) return {};
  if (!detail::claim_in_this_backward(this)) return {};
  return d;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor incoming = std::move(grads[0]);
  if (!incoming.defined()) return {};
  Tensor leaf(leaf_);
  AutogradMeta& meta = autograd_meta(leaf);
  RG_CHECK(incoming.shape() == leaf.shape(), "backward", "gradient ", incoming.desc(),
           " does not match the shape of the leaf ", leaf.desc());
  const bool in_destination = same_memory(incoming, meta.grad_destination);
  if (in_destination && !meta.grad.defined()) {
    meta.grad = meta.grad_destination;  // Note [Gradient destinations]: written in place, no copy
  } else if (meta.grad.defined()) {
    // .grad was empty when the producer took the destination; only a hook can have set it since.
    // If that .grad is the destination's memory, its old value was overwritten by the gradient.
    RG_CHECK(!(in_destination && meta.grad.storage() == meta.grad_destination.storage()), "backward",
             "the .grad of leaf ", leaf.desc(),
             " was set to its gradient destination while backward was writing "
             "the gradient there (from a hook); its previous value is lost. Do not set .grad during backward");
    // In place, so a .grad that is a view into caller-owned storage (a DDP bucket) stays that view.
    native::binary_(BinaryOp::add, meta.grad,
                    incoming.dtype() == leaf.dtype() ? incoming : native::cast(incoming, leaf.dtype()));
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
