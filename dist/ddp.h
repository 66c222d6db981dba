// DistributedDataParallel: data-parallel training of one Module across the ranks of a ProcessGroup.
//
//   auto group = std::shared_ptr<dist::ProcessGroup>(dist::new_group("auto"));
//   dist::DistributedDataParallel ddp(model, group);          // checks + broadcasts rank 0's weights
//   for (auto& [x, y] : loader) {                             // each rank: its own shard of the data
//     Tensor loss = cross_entropy(ddp(x), y);
//     opt.zero_grad();
//     loss.backward();                                        // gradients are averaged when it returns
//     opt.step();                                             // every replica takes the same step
//   }
//
// How it works, in the order things happen (docs/ddp.md has the picture):
//  1. Construction: every rank must hold the same parameters (names, shapes, dtypes -- checked, an
//     error names the first difference and the ranks that differ); rank 0's parameters and buffers
//     are broadcast, so all replicas start identical.
//  2. Parameters are grouped into buckets (dist/reducer.h): one contiguous buffer per bucket, and
//     each parameter's .grad is a view into it, so the gradients are already where the AllReduce
//     needs them -- no copy in or out.
//  3. During backward, each parameter's post-accumulate-grad hook marks it ready. A bucket whose
//     parameters are all ready is reduced asynchronously on the group's communication thread while
//     backward goes on computing earlier layers' gradients: communication overlaps computation.
//  4. At the end of backward, a callback waits for the outstanding reductions. When backward()
//     returns, every rank holds the same averaged gradients, so the optimizer steps stay in lockstep.
//
// Note [Average, not sum]: each rank's loss is a mean over its B examples, so the mean over ranks
// of their gradients is the gradient of the mean loss over all N·B examples -- exactly one
// process training with batch N·B. Summing would give N times that: the same as multiplying the
// learning rate by N behind the user's back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/trace.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace ringgrad::optim {
class GradScaler;
}

namespace ringgrad::dist {

class Reducer;

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
// and `then` ran, bucket.buffer must hold the gradient averaged over ranks. It is called on the
// thread running backward, in bucket index order on every rank; it must issue the same collectives
// on every rank.
using CommHook = std::function<HookWork(ProcessGroup& group, GradBucket& bucket)>;

// The default: AllReduce-average. f16 buckets are divided by N first and then summed, so that a
// backend summing in f16 (NCCL) cannot overflow where the average would not.
HookWork allreduce_hook(ProcessGroup& group, GradBucket& bucket);
// For f32 models: the bucket travels as f16 (half the bytes), averaged, and is widened back. The
// division by N happens in f32 before the cast, so the f16 values stay in range. Costs ~3 decimal
// digits of the gradient (f16 has an 11-bit significand).
HookWork fp16_compress_hook(ProcessGroup& group, GradBucket& bucket);
// By name: "allreduce" or "fp16" (examples' --comm-hook).
CommHook comm_hook_by_name(const std::string& name);

struct DDPOptions {
  double bucket_cap_mb = 25;     // bucket size limit (MiB); a larger parameter gets a bucket of its own
  double first_bucket_mb = 1;    // the first bucket is small so that communication starts early
  // Parameters that receive no gradient in a backward are reduced with zero gradients (the model
  // skips some parameters, e.g. a conditional branch). Off: that is an error naming them.
  bool find_unused_parameters = false;
  // Rank 0's buffers (running statistics, counters: state that is not a parameter) are broadcast at
  // construction and at the start of every forward, as PyTorch's DDP does, so buffers a rank updates
  // on its own shard cannot drift apart. One broadcast per buffer; nothing when the model has none.
  // The buffers are those the module has at construction (updated in place, as running statistics
  // are; a buffer replaced by a new tensor later is not followed -- as in PyTorch).
  bool broadcast_buffers = true;
  // After the first synchronising backward, rebuild the buckets once from the order in which
  // gradients actually became ready (rank 0's order, broadcast so every rank agrees).
  bool rebuild_buckets = true;
  CommHook comm_hook;  // empty: allreduce_hook
  // Record trace events: forward / backward nodes on a "compute" row, each bucket's reduction on
  // the group's communication row (trace_events(), write_trace()).
  bool trace = false;
};

// Where the time of one optimizer step went, on this rank. A step ends with a synchronising
// backward; it begins at the first forward after the previous step ended.
struct DDPStepTimes {
  double compute_ms = 0;        // first forward -> end of the last backward's computation
  double comm_ms = 0;           // sum over buckets of their reductions' time on the communication thread
  double exposed_comm_ms = 0;   // end of backward's computation -> every reduction done (what waiting cost)
  double overlap_percent() const {  // share of communication hidden behind computation
    return comm_ms > 0 ? 100.0 * std::max(0.0, 1.0 - exposed_comm_ms / comm_ms) : 100.0;
  }
};

struct DDPStats {
  int64_t steps = 0;           // synchronising backwards
  int64_t bucket_reductions = 0;
  int64_t bytes_reduced = 0;   // bucket bytes handed to the comm hook
  DDPStepTimes total;          // summed over steps
  DDPStepTimes last;           // the last step
  std::string summary() const;  // one line: steps, compute / comm / exposed ms per step, overlap %
};

// Read-only description of a bucket, for tests and docs.
struct BucketInfo {
  int index = 0;
  DType dtype = DType::f32;
  int64_t numel = 0;
  std::vector<std::string> parameter_names;
  // Reduced in place in memory every rank maps (ProcessGroup::reduces_in_place), not over messages.
  bool in_shared_memory = false;
};

class DistributedDataParallel {
 public:
  // Collective: every rank must construct it, with the same model structure, in the same order
  // relative to other collectives on `group`.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Runs the module's forward (x: whatever it takes).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& group() { return *group_; }

  // Gradient accumulation: backward passes while a guard is alive accumulate into .grad locally
  // and communicate nothing; the next backward after it communicates the sum once. Only where the
  // backward runs matters, not where the forward ran.
  //
  //   for (int k = 0; k < K - 1; ++k) { auto guard = ddp.no_sync(); loss(k).backward(); }
  //   loss(K - 1).backward();   // one AllReduce per bucket for K micro-batches
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  void set_comm_hook(CommHook hook);

  const DDPStats& stats() const;
  void reset_stats();
  std::vector<BucketInfo> buckets() const;

  // Compute and communication events of this rank (empty unless DDPOptions::trace), and a Chrome
  // trace of every rank's events gathered to rank 0 (collective; rank 0 writes `path`).
  std::vector<TraceEvent> trace_events() const;
  void write_trace(const std::string& path);

 private:
  friend class NoSyncGuard;
  void sync_buffers();  // broadcast rank 0's buffers (when options_.broadcast_buffers)
  std::shared_ptr<nn::Module> module_;
  std::vector<Tensor> buffers_;  // the module's buffers at construction, when they are broadcast
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

// Mixed precision across ranks: makes `scaler` combine its found-inf flag over the group (max), so
// that when any rank's gradients overflowed every rank skips the step, and the replicas stay equal.
void sync_found_inf(optim::GradScaler& scaler, std::shared_ptr<ProcessGroup> group);

}  // namespace ringgrad::dist
