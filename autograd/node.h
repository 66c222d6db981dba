// The autograd graph: a Node is the backward of one forward op; its edges point at the producers of
// the op's inputs (another Node's output, or a leaf's AccumulateGrad).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::autograd {

using TensorList = std::vector<Tensor>;

class Node;

// Where a gradient flows: input `input_nr` of `node`. An edge with no node carries nothing (the input
// did not require a gradient).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node {
 public:
  Node();
  virtual ~Node();
  virtual std::string name() const = 0;
  // grads: one per forward output (undefined where that output received no gradient).
  // Returns one gradient per next_edges entry (undefined where none is needed).
  virtual TensorList apply(TensorList&& grads) = 0;
  // Frees tensors saved for backward; after this, apply() must not run again.
  virtual void release_saved() {}
  // Number of forward outputs, i.e. the size of the grads list apply() receives.
  uint32_t num_outputs = 1;
  std::vector<Edge> next_edges;
  // Creation order. The engine runs ready nodes latest-created first, which is a reverse
  // topological order and makes gradient order deterministic.
  uint64_t sequence_nr;
  // AccumulateGrad nodes run as soon as they are ready, ahead of any other ready node, so a leaf's
  // post-accumulate-grad hooks fire the moment its gradient is final (what lets DDP start reducing
  // a bucket while backward continues).
  bool runs_first = false;
  bool released = false;
  // Non-leaf tensors that asked to keep their gradient (Tensor::retain_grad): output number -> tensor.
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained_grads;
};

// Per-tensor autograd state, created lazily (most tensors never need it).
struct AutogradMeta {
  bool requires_grad = false;  // set on leaves by the user
  Tensor grad;
  std::shared_ptr<Node> grad_fn;         // null for leaves
  uint32_t output_nr = 0;                // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  // leaves: the AccumulateGrad node, shared by every graph
  bool retains_grad = false;
  int next_hook_handle = 0;
  std::vector<std::pair<int, std::function<void(Tensor&)>>> post_accumulate_grad_hooks;
  // Leaves: where the next gradient may be written when .grad is empty (set_grad_destination in
  // autograd/engine.h; Note [Gradient destinations] in autograd/accumulate_grad.h).
  Tensor grad_destination;
};

AutogradMeta& autograd_meta(const Tensor& t);  // creates the meta when missing

// The sequence_nr the next node created will get: every node with a smaller one existed before.
uint64_t next_sequence_nr();

// The edge through which a gradient for `t` flows: its grad_fn's output, its leaf accumulator, or an
// invalid edge when `t` does not require grad.
Edge gradient_edge(const Tensor& t);

// What a backward lambda is told about its inputs: needs[i] is true when input i wants a gradient (a
// lambda may return an undefined tensor for an input that does not, and should skip expensive work
// for it); destination(i, ...) offers memory to write input i's whole gradient into instead of
// allocating it (Note [Gradient destinations] in autograd/accumulate_grad.h).
class NeedsGrad {
 public:
  explicit NeedsGrad(const std::vector<Edge>& edges) : edges_(&edges) {}
  bool operator[](size_t i) const { return (*edges_)[i].valid(); }
  size_t size() const { return edges_->size(); }
  // The buffer input i's gradient should be written into -- a contiguous tensor of exactly `shape`,
  // `dtype` and `device` -- or an undefined tensor (the common case: allocate as usual). A lambda that
  // takes it must fill all of it with the gradient and return it as that input's gradient.
  Tensor destination(size_t i, const Shape& shape, DType dtype, Device device) const;

 private:
  const std::vector<Edge>* edges_;
};

// A node whose backward is a lambda. The lambda holds the saved tensors (always detached, so a node
// never keeps its own output alive through a cycle); release_saved() drops it. Before the lambda
// runs, undefined output gradients are replaced by zeros of the output's shape, so a lambda always
// sees one defined gradient per forward output.
class FunctionNode : public Node {
 public:
  using Backward = std::function<TensorList(const TensorList& grads, const NeedsGrad& needs)>;
  FunctionNode(std::string name, Backward backward) : name_(std::move(name)), backward_(std::move(backward)) {}
  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release_saved() override { backward_ = nullptr; }

 private:
  friend std::shared_ptr<Node> record(const char*, const std::vector<Tensor>&, const std::vector<Tensor>&, Backward);
  std::string name_;
  Backward backward_;
  struct OutputInfo {
    Shape shape;
    DType dtype;
    Device device;
  };
  std::vector<OutputInfo> outputs_;
};

// Connects `outputs` (results of one forward op) to a new backward node. `inputs` are the op's
// differentiable inputs, in the order the backward returns their gradients. Does nothing when grad
// mode is off or no input requires grad. Returns the node (or null).
std::shared_ptr<Node> record(const char* op, const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                             FunctionNode::Backward backward);

}  // namespace ringgrad::autograd
