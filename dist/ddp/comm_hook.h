// Communication hooks: how DistributedDataParallel reduces one bucket (public; dist/ddp/ddp.h
// includes it). The types a hook sees, and the built-in hooks, which the Reducer calls
// (dist/ddp/reducer.h) and users may pass in DDPOptions::comm_hook or wrap in their own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"
#include "dist/process_group.h"

namespace ringgrad::dist {

// One bucket as a communication hook sees it.
struct GradBucket {
  int index = 0;                             // launch order, the same on every rank
  Tensor buffer;                             // (numel) of one dtype; the parameters' .grad are views into it
  std::vector<std::string> parameter_names;  // in buffer order
  std::vector<Shape> parameter_shapes;       // likewise; parameter k's gradient starts where k-1's ends
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

// What a stateful hook keeps between steps and what it sent, for memory reports and step
// statistics. Hooks run on the thread running backward, one bucket at a time: no locking.
class CommHookState {
 public:
  virtual ~CommHookState() = default;
  virtual int64_t state_bytes() const = 0;  // kept between steps (residuals, ...)
  // This rank's state for a checkpoint (CommHookCheckpoint), under names that are the same on
  // every rank; and its restoration. Counters (sent, calls) are statistics, not state.
  virtual StateDict local_state() const = 0;
  virtual void load_local_state(const StateDict& state) = 0;
  WireBytes sent;     // this rank's bytes on the wire, over every call so far
  int64_t calls = 0;  // buckets reduced
};

// A hook's state as a TrainingCheckpoint component (optim/training_checkpoint.h). The state is per
// rank (error feedback's residuals differ from rank to rank) while rank 0 alone writes the file, so
// every rank calls gather() -- a collective -- before each save, and rank 0's file then holds every
// rank's state; on load each rank takes its own, so a resume is bit-exact where DDP's buckets
// come back in the same layout (docs/compression.md). Resuming at another
// world size is refused (which rank's residuals would a new rank take?).
//
//   dist::CommHookCheckpoint hook_ckpt(hook.state, group);
//   checkpoint.add("comm_hook", hook_ckpt);
//   hook_ckpt.gather(); checkpoint.save(path);     // every rank
class CommHookCheckpoint {
 public:
  CommHookCheckpoint(std::shared_ptr<CommHookState> state, std::shared_ptr<ProcessGroup> group);
  void gather();
  // "world_size" and "rank<r>.<key>" of every rank, as gathered -- or of this rank alone when the
  // hook ran since (a load's snapshot; a file saved so is refused on load by the other ranks).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  std::shared_ptr<CommHookState> state_;
  std::shared_ptr<ProcessGroup> group_;
  StateDict gathered_;
  int64_t gathered_at_calls_ = -1;  // the hook's calls when gathered: later calls make it stale
};

// Note [Residuals by parameter]: what error feedback keeps, one f32 value per gradient element,
// laid out as a bucket's buffer so that it adds to it in one pass -- but owned by parameter, so
// that when DDP rebuilds its buckets (after the first step, in the observed order) each
// parameter's residual moves with it to its new place.
class ResidualsByParameter {
 public:
  // The residual of this bucket's parameters, (bucket.buffer.numel()) f32: zeros at first; after a
  // rebuild, each parameter's residual carried over from wherever it was.
  Tensor for_bucket(const GradBucket& bucket);
  // This parameter's residual, flat (numel) f32; undefined before its bucket's first reduction.
  Tensor of(const std::string& parameter) const;
  int64_t bytes() const;
  // "<prefix><parameter>" -> its residual; and back (residuals absent from `state` become zeros).
  StateDict state(const std::string& prefix) const;
  void load(const StateDict& state, const std::string& prefix);

 private:
  struct Layout {
    std::vector<std::string> names;
    Tensor residual;
  };
  std::vector<Layout> by_bucket_;                       // by GradBucket::index
  std::vector<std::pair<std::string, Tensor>> slices_;  // parameter -> its view of a residual
};

// The low-precision hooks: the bucket averaged by ProcessGroup::allreduce_low_precision, bf16 or
// scaled FP8 on the wire and f32 sums (Note [Low-precision ring]), with error feedback (Note
// [Error feedback]) when asked: what this rank's encodings dropped is kept per parameter, in f32,
// and added to its gradient in the next synchronising step. CPU buckets of f32, f16 or bf16, on
// the MPI backends.
struct LowPrecisionHookOptions {
  WireFormat wire = WireFormat::fp8_e4m3;
  bool error_feedback = true;
  int64_t scale_block = kDefaultScaleBlock;
};
class LowPrecisionHookState : public CommHookState {
 public:
  explicit LowPrecisionHookState(LowPrecisionHookOptions options) : options(options) {}
  const LowPrecisionHookOptions options;
  ResidualsByParameter residuals;  // with error feedback
  int64_t state_bytes() const override { return residuals.bytes(); }
  StateDict local_state() const override { return residuals.state("residual."); }
  void load_local_state(const StateDict& state) override { residuals.load(state, "residual."); }
};
CommHook low_precision_hook(std::shared_ptr<LowPrecisionHookState> state);

// PowerSGD's settings (its hook and state: dist/ddp/powersgd.h, Note [PowerSGD]); the defaults
// are PyTorch's PowerSGDState's.
struct PowerSgdOptions {
  int rank = 1;                     // r, the approximation's rank (PyTorch: matrix_approximation_rank)
  int64_t start_iteration = 1000;   // steps of plain AllReduce first (PyTorch's start_powerSGD_iter)
  double min_compression_rate = 2;  // compress a matrix only if n m > (n + m) r * this
  bool error_feedback = true;
  bool warm_start = true;    // start from last step's Q (else a new random Q every step)
  uint64_t random_seed = 0;  // the initial Qs: the same on every rank
};

// A hook chosen by name, with its state where it has one (null otherwise): "allreduce" (or
// "none"), "fp16", "bf16" and "bf16-ef" (error feedback), "fp8-e4m3" and "fp8-e5m2" (with error
// feedback), "fp8-e4m3-noef" and "fp8-e5m2-noef" (without), "powersgd" (with `powersgd`'s
// settings). The examples' --comm-hook.
struct NamedCommHook {
  CommHook hook;
  std::shared_ptr<CommHookState> state;
};
NamedCommHook make_comm_hook(const std::string& name, const PowerSgdOptions& powersgd = {});
// The names make_comm_hook takes, for --help lines and errors.
const char* comm_hook_names();
// make_comm_hook(name).hook.
CommHook comm_hook_by_name(const std::string& name);

}  // namespace ringgrad::dist
