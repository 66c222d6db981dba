#include "autograd/node.h"

#include <atomic>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "core/ops.h"

namespace ringgrad::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr(g_next_sequence_nr++) {}

uint64_t next_sequence_nr() { return g_next_sequence_nr.load(); }

// Destroying the last reference to a long chain of nodes (a graph 100k ops deep) would recurse once
// per node inside nested destructors and overflow the stack. Instead each destructor hands the
// children it owns alone to a per-thread list, which the outermost destructor drains in a loop.
Node::~Node() {
  thread_local bool draining = false;
  thread_local std::vector<std::shared_ptr<Node>> orphans;
  for (Edge& e : next_edges)
    if (e.node && e.node.use_count() == 1) orphans.push_back(std::move(e.node));
  next_edges.clear();
  if (draining) return;
  draining = true;
  while (!orphans.empty()) {
    std::shared_ptr<Node> last = std::move(orphans.back());
    orphans.pop_back();
    last.reset();  // its destructor appends its own children
  }
  draining = false;
}

AutogradMeta& autograd_meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  RG_CHECK(impl != nullptr, "autograd", "use of an undefined tensor");
  if (!impl->autograd)  // core/tensor.h cannot delete an AutogradMeta: tell it how (AutogradMetaDeleter)
    impl->autograd = std::unique_ptr<AutogradMeta, AutogradMetaDeleter>(new AutogradMeta(),
                                                                        AutogradMetaDeleter{
                                                                            [](AutogradMeta* meta) { delete meta; }});
  return *impl->autograd;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return {};
  AutogradMeta& meta = *t.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  if (!meta.requires_grad) return {};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

Tensor NeedsGrad::destination(size_t i, const Shape& shape, DType dtype, Device device) const {
  const Edge& edge = (*edges_)[i];
  auto* accumulator = dynamic_cast<AccumulateGrad*>(edge.node.get());
  return accumulator ? accumulator->claim_destination(shape, dtype, device) : Tensor();
}

TensorList FunctionNode::apply(TensorList&& grads) {
  RG_CHECK(backward_ != nullptr, "backward",
           "trying to backward through the graph a second time (the saved tensors of ", name_,
           " were freed after the first backward); pass retain_graph = true to the first backward");
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) {
      const OutputInfo& o = outputs_[i];
      grads[i] = zeros(o.shape, {.dtype = o.dtype, .device = o.device});
    }
  }
  const NeedsGrad needs(next_edges);
  TensorList result = backward_(grads, needs);
  RG_CHECK(result.size() == next_edges.size(), name_, "backward returned ", result.size(), " gradients for ",
           next_edges.size(), " inputs");
  return result;
}

std::shared_ptr<Node> record(const char* op, const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                             FunctionNode::Backward backward) {
  if (!any_requires_grad(inputs)) return nullptr;
  auto node = std::make_shared<FunctionNode>(op, std::move(backward));
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  for (size_t i = 0; i < outputs.size(); ++i) {
    AutogradMeta& meta = autograd_meta(outputs[i]);
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
    node->outputs_.push_back({outputs[i].shape(), outputs[i].dtype(), outputs[i].device()});
  }
  return node;
}

}  // namespace ringgrad::autograd
