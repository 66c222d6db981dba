// The backward engine, grad mode, and the two hooks the distributed module is built on.
//
// ============================== The backward contract (public) ==================================
//
// backward(roots, grads) runs every node reachable from `roots` exactly once, in reverse topological
// order: a node runs only when every node that feeds it a gradient has run (dependency counts), and
// among ready nodes AccumulateGrad nodes run first, then the most recently created node. Gradients arriving at the same input are
// summed before the node runs. Nodes run on the calling thread, with grad mode off.
//
// Post-accumulate-grad hooks (Tensor::register_post_accumulate_grad_hook):
//   * A leaf (a tensor with requires_grad set by the user, such as a parameter) gets its gradient
//     through its AccumulateGrad node. That node runs once per backward, after *all* gradient
//     contributions to the leaf have been summed, so when it runs the leaf's gradient for this
//     backward is final.
//   * AccumulateGrad adds the new gradient into .grad in place when .grad is defined (so .grad may be
//     a view into storage the caller owns, e.g. a DDP bucket, and stays that view), or sets .grad to
//     it when undefined. Then it calls the leaf's post-accumulate-grad hooks, in registration order,
//     with the leaf (whose .grad holds the accumulated value).
//   * Hooks therefore fire in the order gradients become ready: for a feed-forward network, last
//     layer first: an AccumulateGrad node runs as soon as its count reaches zero, before any other
//     ready node, so the hook fires before backward moves on to earlier layers. A hook may read or modify .grad and may start asynchronous work; it must not run
//     backward itself.
//   * Leaves that no path from the roots reaches get no hook call in that backward.
//
// End-of-backward callbacks (queue_callback):
//   * queue_callback(fn), called while a backward is running (typically from a post-accumulate-grad
//     hook), schedules fn to run once after the last node of that backward, before backward()
//     returns. Callbacks run in the order queued; a callback may queue further callbacks.
//   * If a node or hook throws, the remaining nodes and callbacks are skipped and backward() rethrows.
//   * Calling queue_callback outside a backward is an error.
//
// Gradient destinations (set_grad_destination): a leaf whose .grad is empty may name the memory its
// next gradient should be written into; a node that computes the leaf's whole gradient writes it
// there, and .grad becomes that tensor with no copy (Note [Gradient destinations] in
// autograd/accumulate_grad.h). The gradient's values are the same with or without one; its memory
// is not: a hook then sees the destination itself, which its owner (DDP: the bucket, averaged in
// place, overwritten by the next backward) may change later.
//
// retain_graph: without it, each node frees what it saved after it runs; a second backward through
// the same graph is then an error that says to pass retain_graph = true.
// ================================================================================================
#pragma once

#include <functional>
#include <vector>

#include "autograd/node.h"
#include "core/tensor.h"

namespace ringgrad::autograd {

// Runs backward from `roots`. grads[i] is d(output)/d(roots[i]); an undefined grads[i] (or an
// empty list) means 1 for a one-element root and is an error for any other root.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {}, bool retain_graph = false);

// Gives the leaf `leaf` a gradient destination: a contiguous tensor of its shape, dtype and device
// (an undefined tensor removes it). DDP points each parameter at its slot in a bucket.
void set_grad_destination(const Tensor& leaf, const Tensor& destination);

namespace detail {
// True the first time `key` is claimed in the backward running on this thread (false outside one).
bool claim_in_this_backward(const void* key);
// Inside a running backward (from a node's apply): runs the graph below `roots`, each given its
// gradient (undefined: skipped), but stops at the nodes `captured` points at -- they do not run --
// and returns the gradient that reached each captured edge (undefined where none did). It belongs
// to the backward that calls it: gradient destinations are claimed once across both, and hooks
// queue their callbacks to its end. A checkpoint's recompute uses it (autograd/activation_checkpoint.h).
TensorList backward_to(const std::vector<Tensor>& roots, const TensorList& grads, const std::vector<Edge>& captured);
}  // namespace detail

// Schedules `callback` to run once at the end of the backward now running (see the contract above).
void queue_callback(std::function<void()> callback);

// True while this thread is inside backward().
bool in_backward();

// Observes every node backward runs on this thread: its name and when it ran (trace_clock_us(),
// core/trace.h). DDP uses it to put backward on its trace's compute row. Empty: none (the default);
// the engine then reads no clock.
using NodeObserver = std::function<void(const std::string& node_name, double start_us, double end_us)>;
void set_node_observer(NodeObserver observer);

// Grad mode is per thread. With it off, ops record no graph (the results do not require grad).
bool grad_enabled();
void set_grad_enabled(bool enabled);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any defined input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

}  // namespace ringgrad::autograd

namespace ringgrad {
using autograd::NoGradGuard;
}
