// Activation checkpointing: keep a block's inputs, not its activations, and compute the block's
// forward a second time during backward (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
// Cost"; PyTorch's torch.utils.checkpoint).
//
//   // x: (B, T, C) -> (B, T, C); the tensors block saves for its backward are freed at once
//   Tensor y = autograd::checkpoint([&](const Tensor& in) { return (*block)(in); }, x);
//
// Most of a transformer's memory at training time is activations: every op keeps what its backward
// needs (the layer norm's input, the attention probabilities, the GELU's input, ...), a dozen
// (B, T, C)-sized tensors per block, alive from the block's forward until its backward. A
// checkpointed block keeps only its input: what it saved is dropped as soon as its forward ends,
// and recomputed from the input when backward reaches the block. Memory: one block's activations
// plus every block's input, against all blocks' activations; cost: one more forward per block (about
// a third of a step). nn::Module::checkpoint_activations() turns it on for a module's calls.
//
// Why a function of tensors and not a wrapper module: the recompute must run exactly what the
// forward ran, and a function is the unit that says so. A module-shaped wrapper would also rename
// the parameters ("block.module.ln_1.weight"), and checkpoints written with and without it would
// stop matching; Module::checkpoint_activations() is a flag on the module instead.
//
// What it guarantees:
//   * The gradients are the ones without checkpointing, bit for bit: the recompute runs the same
//     kernels on the same inputs in the same order (both times with grad mode on), and its backward
//     is the block's backward. One exception: a tensor used twice or more inside the block and
//     again outside it gets its in-block contributions summed first, then the outside one, where
//     the plain backward sums in arrival order -- the same terms, rounded in another order.
//   * Dropout inside the block draws the same numbers in the recompute: the default and dropout
//     generators' states (core/random.h) are recorded at the forward, set for the recompute, and put
//     back after it, so the draws of code that runs after the backward do not change either. A
//     generator of a layer's own (nn::Dropout's) is replayed alike when the layer announces it
//     (replay_in_recompute, below), as nn::Dropout does.
//   * Each parameter's gradient arrives once per backward, through the backward that is running
//     (Note [Recompute inside backward]), so its post-accumulate-grad hook -- DDP's, ZeRO's -- fires
//     once, and in the same place on every rank. A block whose inputs do not require grad still
//     passes gradients to its parameters (PyTorch's reentrant checkpoint does not).
//   * Nested checkpoints are supported: a checkpointed block may contain checkpointed blocks. The
//     inner ones recompute again inside the outer recompute (three forwards of the innermost block
//     in all), which saves memory only where the outer block's activations dominate.
//   * State a forward updates is updated once: BatchNorm2d's running statistics skip their update in
//     the recompute (recomputing(), below), where PyTorch's checkpoint updates them twice.
//   * With grad mode off (evaluation), fn simply runs.
//
// What it refuses, with an error that names the checkpoint: a recompute that does not reach the
// same parameters and outer tensors as the forward did (fn must be a deterministic function of its
// inputs and the state it captures), an output of another shape or dtype, and a second backward
// through the same checkpoint without retain_graph.
//
// Note [Recompute inside backward]: the block's forward runs twice. The first time (in forward) it
// runs with grad mode on, so that its graph can be inspected: every edge by which the block's graph
// leaves the block -- the AccumulateGrad of each parameter it uses, and any node made before the
// block began (a tensor its closure captured) -- becomes an edge of one CheckpointNode, beside the
// block's inputs. Then that graph, and with it the activations, is dropped; the outputs keep only
// the CheckpointNode. When backward reaches that node, it computes the block again from the saved
// inputs and runs the new graph's backward in the same engine (autograd::detail::backward_to), but
// stops at those exit edges: the gradients that reach them are returned as the node's own outputs,
// and the outer backward delivers them. So a parameter's AccumulateGrad runs in the outer backward,
// once, after every contribution (a tied weight used inside and outside the block too), and hooks,
// gradient destinations (a DDP bucket slot is still written in place) and end-of-backward callbacks
// behave as without checkpointing. What changes is when: a block's gradients all become ready when its
// recompute's backward ends, not one layer at a time.
#pragma once

#include <functional>

#include "autograd/node.h"
#include "core/random.h"
#include "core/tensor.h"

namespace ringgrad::autograd {

// fn: inputs -> outputs. Called with detached copies of `inputs` (requiring grad where the input
// does); must not keep them. Returns fn's outputs, connected to the graph through one node. fn is
// kept until the backward runs it again: what it captures must live that long (capture by value,
// or a module that outlives the step).
using CheckpointFunction = std::function<TensorList(const TensorList& inputs)>;
TensorList checkpoint(const CheckpointFunction& fn, const TensorList& inputs);

// One tensor in, one out.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

// True while a checkpointed block is being computed again, during backward, on this thread. A
// module whose forward updates its own state (BatchNorm2d's running statistics) skips the update
// then: the forward already made it.
bool recomputing();

// Code that draws from a generator other than the default and dropout streams calls this before
// drawing: inside a checkpointed block's forward, the generator's state is recorded (once per
// block), and the recompute starts it from there and puts it back afterwards. Elsewhere it does
// nothing. The checkpoint keeps the generator alive until its backward.
void replay_in_recompute(const std::shared_ptr<Generator>& generator);

}  // namespace ringgrad::autograd
