// The ladder: from the most naive data parallelism to DDP's, one rung at a time (docs/learn/13).
//
//   rung 1  naive.cpp        after backward, one AllReduce per parameter
//   rung 2  flat.cpp         after backward, every gradient copied into one buffer, one AllReduce
//   rung 3  buckets.cpp      after backward, buckets of about kBucketBytes, one AllReduce each
//   rung 4  overlap.cpp      during backward: a bucket's AllReduce starts as soon as its last
//                            gradient is ready (post-accumulate-grad hooks), while backward goes on
//   rung 5  (overlap.cpp)    rung 4 over K micro-batches, communicating only on the last: no_sync
//
// Each rung is a GradientSync: it runs a backward and leaves in every parameter's .grad the
// gradient averaged over the ranks. Each program (ladder.cpp's climb) trains its rung and the rung
// below it side by side on identical replicas and the same batches, checks after every step that
// their averaged gradients are equal (to f32 rounding: the same sums, possibly grouped otherwise),
// and prints both step times. Every rank runs the same steps; a slow link is simulated
// (GroupOptions::simulated_network) so that what a rung saves is visible on one machine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/process_group.h"
#include "nn/nn.h"

namespace learn {

// One bucket's limit in bytes (rungs 3-5): this model's 2 MiB of gradients make a few.
inline constexpr int64_t kBucketBytes = 1 << 20;

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual std::string name() const = 0;
  // Runs loss.backward() and, when `synchronise`, leaves every .grad averaged over the ranks.
  // Without it (rung 5's accumulating micro-batches) gradients only accumulate locally.
  virtual void backward(const ringgrad::Tensor& loss, bool synchronise) = 0;
};

// The rungs, each built over `model`'s parameters and a process group.
std::unique_ptr<GradientSync> make_naive(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group);
std::unique_ptr<GradientSync> make_flat(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group);
std::unique_ptr<GradientSync> make_buckets(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group);
std::unique_ptr<GradientSync> make_overlap(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group);

// The parameters in the order backward finishes them (the reverse of the forward's), cut into
// buckets of at most kBucketBytes (a larger parameter alone): rungs 3-5.
std::vector<std::vector<ringgrad::Tensor>> buckets_in_backward_order(ringgrad::nn::Module& model);

// A rung's program: trains `rung` against `below` (the rung under it; null: one process on the
// whole global batch), over `accumulation` micro-batches per step (1 but for rung 5): `rung`
// synchronises on the last micro-batch only, `below` on every one. Returns the exit status: 0 when
// the averaged gradients agreed at every step.
using MakeRung = std::unique_ptr<GradientSync> (*)(ringgrad::nn::Module&, ringgrad::dist::ProcessGroup&);
int climb(int argc, char** argv, MakeRung rung, MakeRung below, int accumulation = 1);

}  // namespace learn
