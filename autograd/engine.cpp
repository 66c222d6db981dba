// The backward engine: dependency counting over the graph reachable from the roots, then a ready
// queue ordered by node creation (latest first). See the contract in autograd/engine.h.
#include "autograd/engine.h"

#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "core/trace.h"

namespace ringgrad::autograd {
namespace {

thread_local bool t_grad_enabled = true;

// State of one backward() call; callbacks queued during it run at its end.
struct GraphTask {
  std::vector<std::function<void()>> callbacks;
  std::unordered_set<const void*> claimed_destinations;  // Note [Gradient destinations]
};
thread_local GraphTask* t_current_task = nullptr;

// Priority among ready nodes: accumulators first, then the most recently created.
struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const {
    if (a->runs_first != b->runs_first) return b->runs_first;
    return a->sequence_nr < b->sequence_nr;
  }
};

void store_retained_grads(Node& node, const TensorList& buffer) {
  for (const auto& [output_nr, weak] : node.retained_grads) {
    auto impl = weak.lock();
    if (!impl || output_nr >= buffer.size() || !buffer[output_nr].defined()) continue;
    Tensor t(impl);
    AutogradMeta& meta = autograd_meta(t);
    meta.grad = meta.grad.defined() ? native::binary(BinaryOp::add, meta.grad, buffer[output_nr])
                                    : native::cast(buffer[output_nr], t.dtype());
  }
}

}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool in_backward() { return t_current_task != nullptr; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {
thread_local NodeObserver t_node_observer;
}  // namespace

void set_node_observer(NodeObserver observer) { t_node_observer = std::move(observer); }

void set_grad_destination(const Tensor& leaf, const Tensor& destination) {
  if (!destination.defined()) {  // removing one never fails (DDP's destructor does it)
    if (leaf.defined() && leaf.impl()->autograd) leaf.impl()->autograd->grad_destination = Tensor();
    return;
  }
  RG_CHECK(leaf.defined() && leaf.requires_grad() && !leaf.grad_fn(), "set_grad_destination",
           "needs a leaf that requires grad, got ", leaf.defined() ? leaf.desc() : std::string("an undefined tensor"));
  RG_CHECK(destination.shape() == leaf.shape() && destination.dtype() == leaf.dtype() &&
               destination.device() == leaf.device() && destination.is_contiguous(),
           "set_grad_destination", "the destination ", destination.desc(),
           " must be a contiguous tensor of the leaf's shape, dtype and device: ", leaf.desc());
  autograd_meta(leaf).grad_destination = destination;
}

namespace detail {
bool claim_in_this_backward(const void* key) {
  return t_current_task != nullptr && t_current_task->claimed_destinations.insert(key).second;
}
}  // namespace detail

void queue_callback(std::function<void()> callback) {
  RG_CHECK(t_current_task != nullptr, "queue_callback",
           "called outside a backward pass; end-of-backward callbacks can only be queued while backward() "
           "runs (e.g. from a post-accumulate-grad hook)");
  t_current_task->callbacks.push_back(std::move(callback));
}

namespace {

// Runs every node reachable from `root_edges` (each given its gradient) in the order of the contract,
// except the nodes `captured` points at: those are neither run nor traversed, and the gradient that
// reaches each captured edge is returned instead (undefined where none did). backward() captures
// nothing; a checkpoint's recompute captures its block's way out (Note [Recompute inside backward]
// in autograd/activation_checkpoint.h).
TensorList run_graph(const std::vector<Edge>& root_edges, const TensorList& root_grads,
                     const std::vector<Edge>& captured, bool retain_graph) {
  std::unordered_set<const Node*> stops;
  for (const Edge& e : captured)
    if (e.valid()) stops.insert(e.node.get());

  // Input buffers: gradients arriving at each node, summed per output slot.
  std::unordered_map<Node*, TensorList> buffers;
  auto deliver = [&](const Edge& edge, const Tensor& grad) {
    TensorList& buf = buffers[edge.node.get()];
    if (buf.empty()) buf.resize(edge.node->num_outputs);
    Tensor& slot = buf[edge.input_nr];
    slot = slot.defined() ? native::binary(BinaryOp::add, slot, grad) : grad;
  };

  std::vector<Node*> root_nodes;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    deliver(root_edges[i], root_grads[i]);
    if (!stops.count(root_edges[i].node.get())) root_nodes.push_back(root_edges[i].node.get());
  }

  // Dependency counts: how many edges from reachable nodes point at each node.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (Node* n : root_nodes)
    if (seen.insert(n).second) stack.push_back(n);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid() || stops.count(e.node.get())) continue;
      dependencies[e.node.get()]++;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  std::unordered_set<Node*> queued;
  for (Node* n : root_nodes)
    if (dependencies[n] == 0 && queued.insert(n).second) ready.push(n);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList inputs = std::move(buffers[node]);
    buffers.erase(node);
    bool any_defined = false;
    for (const Tensor& g : inputs) any_defined |= g.defined();
    TensorList outputs;
    if (any_defined) {
      store_retained_grads(*node, inputs);
      // The profiler's row for the node ("node:mm"), around the ops its formula calls (the
      // prefix keeps it apart from the forward op of the same name, which the formula may call).
      std::optional<profiler::OpScope> profiled;
      if (profiler::enabled()) profiled.emplace("node:" + node->name());
      if (t_node_observer) {
        const double start_us = trace_clock_us();
        outputs = node->apply(std::move(inputs));
        t_node_observer(node->name(), start_us, trace_clock_us());
      } else {
        outputs = node->apply(std::move(inputs));
      }
      if (!retain_graph && dynamic_cast<AccumulateGrad*>(node) == nullptr) {
        node->release_saved();
        node->released = true;
      }
    }
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (i < outputs.size() && outputs[i].defined()) deliver(e, outputs[i]);
      if (stops.count(e.node.get())) continue;
      if (--dependencies[e.node.get()] == 0) ready.push(e.node.get());
    }
  }

  TensorList result(captured.size());
  for (size_t i = 0; i < captured.size(); ++i) {
    if (!captured[i].valid()) continue;
    auto it = buffers.find(captured[i].node.get());
    if (it != buffers.end() && captured[i].input_nr < it->second.size())
      result[i] = std::move(it->second[captured[i].input_nr]);
  }
  return result;
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  RG_CHECK(t_current_task == nullptr, "backward", "backward() called from inside a backward pass");
  RG_CHECK(grads.empty() || grads.size() == roots.size(), "backward", roots.size(), " roots but ", grads.size(),
           " gradients");
  GraphTask task;
  struct TaskScope {
    explicit TaskScope(GraphTask* t) { t_current_task = t; }
    ~TaskScope() { t_current_task = nullptr; }
  } scope(&task);
  NoGradGuard no_grad;
  profiler::PhaseGuard phase(profiler::Phase::backward);

  std::vector<Edge> root_edges;
  TensorList root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    RG_CHECK(root.defined() && root.requires_grad(), "backward", "tensor ", root.desc(),
             " does not require grad and has no grad_fn");
    Tensor grad = grads.empty() ? Tensor() : grads[i];
    if (!grad.defined()) {
      RG_CHECK(root.numel() == 1, "backward",
               "grad can be implicitly created only for one-element outputs; "
               "got ",
               root.desc(), ", pass an explicit gradient of the same shape");
      grad = ones_like(root);
    }
    RG_CHECK(grad.shape() == root.shape(), "backward", "gradient ", grad.desc(), " does not match output ",
             root.desc());
    root_edges.push_back(gradient_edge(root));
    root_grads.push_back(grad);
  }
  run_graph(root_edges, root_grads, /*captured=*/{}, retain_graph);

  // End-of-backward callbacks; a callback may queue more.
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    auto cb = std::move(task.callbacks[i]);
    cb();
  }
}

namespace detail {
TensorList backward_to(const std::vector<Tensor>& roots, const TensorList& grads, const std::vector<Edge>& captured) {
  RG_CHECK(t_current_task != nullptr, "backward_to", "runs only inside a backward pass");
  RG_CHECK(roots.size() == grads.size(), "backward_to", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;
  std::vector<Edge> root_edges;
  TensorList root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge edge = gradient_edge(roots[i]);
    if (!edge.valid() || !grads[i].defined()) continue;  // an output no gradient reached, or a constant
    root_edges.push_back(std::move(edge));
    root_grads.push_back(grads[i]);
  }
  return run_graph(root_edges, root_grads, captured, /*retain_graph=*/false);
}
}  // namespace detail

}  // namespace ringgrad::autograd
