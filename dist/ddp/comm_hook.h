// Communication hooks: how DistributedDataParallel reduces one bucket (public; dist/ddp/ddp.h
// includes it). The types a hook sees, and the built-in hooks, which the Reducer calls
// (dist/ddp/reducer.h) and users may pass in DDPOptions::comm_hook or wrap in their own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/process_group.h"

namespace ringgrad::dist {

// One bucket as a communication hook sees it.
struct GradBucket {
  int index = 0;                             // launch order, the same on every rank
  Tensor buffer;                             // (numel) of one dtype; the parameters' .grad are views into it
  std::vector<std::string> parameter_names;  // in buffer order
};

// What a hook started: the Work to wait for, and what to run once it completed (may be empty).
struct HookWork {
  std::shared_ptr<Work> work;
  std::function<void()> then;
};

// A communication hook reduces one bucket across the ranks of the group: once its Work completed
// and `then` ran, bucket.buffer must hold the gradient averaged over ranks, since the parameters'
// .grad are views into it and a backward without zero_grad() adds to it. The exception is a hook
// that reduces into storage of its own for an optimizer that reads it there: dist::ZeroOptimizer's
// stage 2 reduce-scatters into each rank's block, where it accumulates, and DDP frees the buffer
// once reduced (Note [Gradient buffers released after the reduction] in dist/ddp/reducer.h). It is
// called on the thread running backward, in bucket index order on every rank; it must issue the
// same collectives on every rank.
using CommHook = std::function<HookWork(ProcessGroup& group, GradBucket& bucket)>;

// Note [Averaging half precision]: how a tensor of `dtype` is averaged over the group, by DDP's
// buckets and ZeRO's reduce-scatter alike. Where the group adds in the accumulation type, one
// ReduceOp::avg divides once, before rounding (Note [Where AVG divides]). Where it adds f16 in f16
// (adds_in_dtype), the sum of N gradients may overflow f16's 65504 where their mean would not, so
// the tensor is first scaled by 1/N and then summed. (bf16 has f32's range: it needs no pre-scale.)
struct Averaging {
  double pre_scale = 1;         // multiply the tensor by this first (1: leave it)
  ReduceOp op = ReduceOp::avg;  // then reduce with this
};
Averaging average_over(const ProcessGroup& group, DType dtype);

// The default: AllReduce-average. On a backend that adds f16 in f16 (nccl), f16 buckets are
// divided by N first and then summed, so that the sum cannot overflow where the average would not
// (Note [Averaging half precision] above).
HookWork allreduce_hook(ProcessGroup& group, GradBucket& bucket);
// For f32 models: the bucket travels as f16 (half the bytes), averaged, and is widened back. The
// division by N happens in f32 before the cast, so the f16 values stay in range. Costs ~3 decimal
// digits of the gradient (f16 has an 11-bit significand).
HookWork fp16_compress_hook(ProcessGroup& group, GradBucket& bucket);
// By name: "allreduce" or "fp16" (examples' --comm-hook).
CommHook comm_hook_by_name(const std::string& name);

}  // namespace ringgrad::dist
