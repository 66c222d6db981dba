// Activation checkpointing: the forward that inspects the block and drops its graph, and the node that
// recomputes it. See Note [Recompute inside backward] in autograd/activation_checkpoint.h.
#include "autograd/activation_checkpoint.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "core/random.h"

namespace ringgrad::autograd {
namespace {

// Sets grad mode for a scope (the recompute runs inside backward, where it is off).
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeScope() { set_grad_enabled(previous_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool previous_;
};

// Generators of layers' own met in a block's forward (replay_in_recompute), each with its state
// before the block's first draw from it.
using OwnGenerators = std::vector<std::pair<std::shared_ptr<Generator>, Generator>>;

// The blocks whose forward is running on this thread, innermost last: a draw inside a nested block
// is a draw of every block around it too.
thread_local std::vector<OwnGenerators*> t_recording;

// The generators dropout and initialisation draw from: recorded at the forward, replayed by the
// recompute (core/random.h).
struct RandomStreams {
  Generator default_stream = default_generator();
  Generator dropout_stream = dropout_generator();
  OwnGenerators own;
  void make_current() const {
    default_generator() = default_stream;
    dropout_generator() = dropout_stream;
    for (const auto& [generator, state] : own) *generator = state;
  }
  // The state of now, for the same generators as `recorded`.
  static RandomStreams now_for(const RandomStreams& recorded) {
    RandomStreams now;
    for (const auto& entry : recorded.own) now.own.emplace_back(entry.first, *entry.first);
    return now;
  }
};

// How many recomputes are running on this thread (nested checkpoints recompute inside one another).
thread_local int t_recompute_depth = 0;

class RecomputeScope {
 public:
  RecomputeScope() { ++t_recompute_depth; }
  ~RecomputeScope() { --t_recompute_depth; }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;
};

// Records the draws of layers' own generators while a block's forward runs.
class RecordingScope {
 public:
  explicit RecordingScope(OwnGenerators* into) { t_recording.push_back(into); }
  ~RecordingScope() { t_recording.pop_back(); }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;
};

// Copies of the inputs that share their memory but none of their history: the block's graph starts
// at them. A copy requires grad where its input does (and grad mode is on).
TensorList detached_inputs(const TensorList& inputs) {
  TensorList out;
  out.reserve(inputs.size());
  for (const Tensor& x : inputs) {
    if (!x.defined()) {
      out.emplace_back();
      continue;
    }
    Tensor d = x.detach();
    if (x.requires_grad() && grad_enabled()) d.requires_grad_(true);
    out.push_back(std::move(d));
  }
  return out;
}

bool same_edge(const Edge& a, const Edge& b) { return a.node == b.node && a.input_nr == b.input_nr; }

// The edges by which the graph below `outputs` leaves the block: the AccumulateGrad of every leaf
// but the block's own inputs (parameters, in practice), and every node created before the block
// began (sequence_nr < first_sequence_nr: a tensor the block's closure captured). In the order
// a depth-first walk from the outputs meets them, once each.
std::vector<Edge> block_exits(const TensorList& outputs, const TensorList& block_inputs, uint64_t first_sequence_nr) {
  // The inputs' accumulators are held through the walk: one made here for an input fn did not use
  // would otherwise be freed at once, and its address could come back as another node's.
  std::vector<Edge> input_edges;
  std::unordered_set<const Node*> input_leaves;
  for (const Tensor& x : block_inputs)
    if (x.defined() && x.requires_grad()) {
      input_edges.push_back(gradient_edge(x));
      input_leaves.insert(input_edges.back().node.get());
    }
  std::vector<Edge> exits;
  std::unordered_set<const Node*> visited;
  std::vector<Edge> stack;
  for (auto it = outputs.rbegin(); it != outputs.rend(); ++it) stack.push_back(gradient_edge(*it));
  while (!stack.empty()) {
    Edge e = std::move(stack.back());
    stack.pop_back();
    if (!e.valid() || input_leaves.count(e.node.get())) continue;
    const bool leaves_block =
        dynamic_cast<AccumulateGrad*>(e.node.get()) != nullptr || e.node->sequence_nr < first_sequence_nr;
    if (leaves_block) {
      if (std::none_of(exits.begin(), exits.end(), [&](const Edge& x) { return same_edge(x, e); }))
        exits.push_back(std::move(e));
      continue;
    }
    if (!visited.insert(e.node.get()).second) continue;
    for (auto it = e.node->next_edges.rbegin(); it != e.node->next_edges.rend(); ++it) stack.push_back(*it);
  }
  return exits;
}

std::string describe(const std::vector<Edge>& edges) {
  std::string out;
  for (const Edge& e : edges) out += str_cat(out.empty() ? "" : ", ", e.node->name(), "#", e.input_nr);
  return out.empty() ? "none" : out;
}

class CheckpointNode : public Node {
 public:
  CheckpointNode(CheckpointFunction fn, TensorList inputs, RandomStreams streams, TensorList outputs)
      : fn_(fn), inputs_(std::move(inputs)), streams_(std::move(streams)) {
    for (const Tensor& y : outputs) output_info_.push_back({y.shape(), y.dtype()});
  }
  std::string name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    fn_ = nullptr;
    inputs_.clear();
  }

  // next_edges: one per block input (invalid where it needs no gradient), then the block's exits.
  TensorList apply(TensorList&& grads) override {
    RG_CHECK(fn_ != nullptr, "checkpoint",
             "trying to backward through a checkpointed block a second time (its saved inputs were freed after "
             "the first backward); pass retain_graph = true to the first backward");
    // The recompute: the forward's random state, grad mode on; then the backward's state again.
    TensorList block_inputs;
    TensorList outputs;
    uint64_t first_sequence_nr = 0;
    {
      const RandomStreams now = RandomStreams::now_for(streams_);
      streams_.make_current();
      GradModeScope grad_on(true);
      for (const Tensor& x : inputs_) {
        block_inputs.push_back(x.defined() ? x.detach() : Tensor());
        if (x.defined() && x.requires_grad()) block_inputs.back().requires_grad_(true);
      }
      first_sequence_nr = next_sequence_nr();
      try {
        RecomputeScope recompute;
        outputs = fn_(block_inputs);
      } catch (...) {
        now.make_current();
        throw;
      }
      now.make_current();
    }
    check_same_outputs(outputs);

    const size_t n_inputs = inputs_.size();
    const std::vector<Edge> exits(next_edges.begin() + static_cast<std::ptrdiff_t>(n_inputs), next_edges.end());
    const std::vector<Edge> again = block_exits(outputs, block_inputs, first_sequence_nr);
    const bool same = again.size() == exits.size() && std::all_of(again.begin(), again.end(), [&](const Edge& e) {
                        return std::any_of(exits.begin(), exits.end(), [&](const Edge& x) { return same_edge(x, e); });
                      });
    RG_CHECK(same, "checkpoint",
             "the recomputed block reached other parameters or outer tensors than its forward did (forward: ",
             describe(exits), "; recompute: ", describe(again),
             "). The checkpointed function must compute the same thing from the same inputs each time");

    // Stop at the block's inputs (their leaves here) and at its exits; what reaches them is ours.
    std::vector<Edge> captured;
    for (size_t i = 0; i < n_inputs; ++i)
      captured.push_back(next_edges[i].valid() ? gradient_edge(block_inputs[i]) : Edge{});
    captured.insert(captured.end(), exits.begin(), exits.end());
    return detail::backward_to(outputs, grads, captured);
  }

 private:
  void check_same_outputs(const TensorList& outputs) const {
    bool same = outputs.size() == output_info_.size();
    for (size_t i = 0; same && i < outputs.size(); ++i)
      same = outputs[i].defined() && outputs[i].shape() == output_info_[i].shape &&
             outputs[i].dtype() == output_info_[i].dtype;
    if (same) return;
    std::string was, now;
    for (const OutputInfo& o : output_info_)
      was += str_cat(was.empty() ? "" : ", ", shape_str(o.shape), " ", dtype_name(o.dtype));
    for (const Tensor& y : outputs) now += str_cat(now.empty() ? "" : ", ", y.defined() ? y.desc() : "undefined");
    RG_CHECK(false, "checkpoint", "the recomputed block returned [", now, "] where its forward returned [", was,
             "]. The checkpointed function must compute the same thing from the same inputs each time");
  }

  struct OutputInfo {
    Shape shape;
    DType dtype;
  };
  CheckpointFunction fn_;
  TensorList inputs_;  // detached: the block's inputs, the only activations a checkpoint keeps
  RandomStreams streams_;
  std::vector<OutputInfo> output_info_;
};

}  // namespace

TensorList checkpoint(const CheckpointFunction& fn, const TensorList& inputs) {
  RG_CHECK(fn != nullptr, "checkpoint", "needs a function to run");
  if (!grad_enabled()) return fn(inputs);
  RandomStreams streams;
  const TensorList block_inputs = detached_inputs(inputs);
  const uint64_t first_sequence_nr = next_sequence_nr();
  TensorList outputs;
  {
    RecordingScope recording(&streams.own);
    outputs = fn(block_inputs);
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    RG_CHECK(outputs[i].defined(), "checkpoint", "the checkpointed function returned an undefined tensor as output ", i,
             " of ", outputs.size(), "; return only defined tensors");
  const std::vector<Edge> exits = block_exits(outputs, block_inputs, first_sequence_nr);
  const bool any_input_needs_grad = std::any_of(block_inputs.begin(), block_inputs.end(),
                                                [](const Tensor& x) { return x.defined() && x.requires_grad(); });
  if (!any_input_needs_grad && exits.empty()) return outputs;  // nothing in it requires grad: no graph to keep

  TensorList saved;
  for (const Tensor& x : inputs) saved.push_back(x.defined() ? x.detach() : Tensor());
  for (size_t i = 0; i < saved.size(); ++i)
    if (block_inputs[i].defined() && block_inputs[i].requires_grad()) saved[i].requires_grad_(true);
  auto node = std::make_shared<CheckpointNode>(fn, std::move(saved), streams, outputs);
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (const Tensor& x : inputs) node->next_edges.push_back(x.defined() ? gradient_edge(x) : Edge{});
  node->next_edges.insert(node->next_edges.end(), exits.begin(), exits.end());

  // The outputs keep their values and lose the block's graph (and the activations it saved).
  TensorList result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !outputs[i].requires_grad()) {
      result.push_back(outputs[i]);
      continue;
    }
    Tensor y = outputs[i].detach();
    AutogradMeta& meta = autograd_meta(y);
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
    result.push_back(std::move(y));
  }
  return result;
}

bool recomputing() { return t_recompute_depth > 0; }

void replay_in_recompute(const std::shared_ptr<Generator>& generator) {
  if (generator == nullptr) return;
  for (OwnGenerators* own : t_recording) {
    const bool seen = std::any_of(own->begin(), own->end(), [&](const auto& e) { return e.first == generator; });
    if (!seen) own->emplace_back(generator, *generator);
  }
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  RG_CHECK(fn != nullptr, "checkpoint", "needs a function to run");
  auto one = [fn](const TensorList& in) { return TensorList{fn(in[0])}; };
  return checkpoint(one, TensorList{input})[0];
}

}  // namespace ringgrad::autograd
