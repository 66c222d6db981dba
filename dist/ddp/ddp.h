// DistributedDataParallel: data-parallel training of one Module across the ranks of a ProcessGroup.
//
//   auto group = dist::new_group("auto");
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
//  2. Parameters are grouped into buckets (dist/ddp/reducer.h): one contiguous buffer per bucket,
//     and each parameter's .grad is a view into it, so the gradients are already where the
//     AllReduce needs them -- no copy in or out.
//  3. During backward, each parameter's post-accumulate-grad hook marks it ready. A bucket whose
//     parameters are all ready is reduced asynchronously on the group's communication thread while
//     backward goes on computing earlier layers' gradients: communication overlaps computation.
//  4. At the end of backward, a callback waits for the outstanding reductions. When backward()
//     returns, every rank holds the same averaged gradients, so the optimizer steps stay in lockstep.
//
// Note [Average, not sum]: each rank's loss is a mean over its B examples, so the mean over ranks
// of their gradients is the gradient of the mean loss over all N·B examples -- exactly one process
// training with batch N·B. Summing would silently give N times that. Under SGD it multiplies the
// learning rate by N (and divides weight decay, added to the gradient, by N). Under Adam / AdamW
// the constant factor cancels out of m / (sqrt(v) + eps), so the damage is smaller but real: eps
// acts N times smaller; clipping to a fixed max norm acts on the mean gradient as if the max norm
// were N times smaller, so it clips more steps, and harder, and Adam does not cancel a rescaling
// that varies from step to step; and Adam's L2 weight decay (added to the gradient, unlike AdamW's
// decoupled decay) weighs N times less against the gradient.
//
// dist/ddp/ is data parallelism on top of a ProcessGroup: this file (the public entry), options.h
// (what DDP is configured with and reports), comm_hook.h (the hook types and the built-in hooks),
// join.h (uneven inputs: ranks out of data answer the others' collectives), reducer.h (internal:
// the buckets and overlapped reductions behind DistributedDataParallel) and recorder.h (internal:
// what the Reducer's steps are observed as -- statistics, trace, narration). Headers include
// downwards only -- join.h -> ddp.h -> options.h -> comm_hook.h, reducer.h -> recorder.h ->
// options.h -- so ddp.h
// never includes reducer.h (it holds a std::unique_ptr<Reducer>), and nothing else in dist/
// includes ddp.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/tensor.h"
#include "core/trace.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/options.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace ringgrad::optim {
class GradScaler;
class TrainingCheckpoint;
class StepCheckHandle;
}  // namespace ringgrad::optim

namespace ringgrad::dist {

class Reducer;
class Join;

class DistributedDataParallel {
 public:
  // Collective: every rank must construct it, with the same model structure, in the same order
  // relative to other collectives on `group`.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Runs the module's single-tensor forward (x: whatever it takes).
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  // Runs a forward of any signature with DDP's per-forward work around it (the step clock, the
  // buffers' broadcast, the trace):
  //   Tensor loss = ddp.forward_as<Net>(x, mask);   // Net::forward(x, mask) on the wrapped module
  //   auto [a, b] = ddp.call([&](nn::Module& m) { return static_cast<Net&>(m).two_heads(x); });
  template <class Fn>
  auto call(Fn&& fn) {
    const double start_us = begin_forward();
    auto out = fn(*module_);
    end_forward(start_us);
    return out;
  }
  template <class M, class... Args>
  auto forward_as(Args&&... args) {
    return call([&](nn::Module& m) {
      M* typed = dynamic_cast<M*>(&m);
      if (typed == nullptr) wrong_module_type(typeid(M).name());
      return typed->forward(std::forward<Args>(args)...);
    });
  }

  nn::Module& module() { return *module_; }
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

  // For an optimizer that shards the buckets across the group's ranks (dist::ZeroOptimizer): pads
  // every bucket to a multiple of `parts` elements and fixes the bucket layout from now on (Note
  // [Buckets for sharding] in dist/ddp/reducer.h). `owner` names that optimizer: while it is
  // registered, a second one is refused (two would each step the same blocks, and the last one's
  // communication hook would win). With `release_gradients` (an optimizer that keeps only its block
  // of the reduced gradient), the buffers exist only from a backward's first gradient until its
  // reductions completed, and .grad is none after a synchronising backward (Note [Gradient buffers
  // released after the reduction]). Collective; not during a backward.
  // `units` (ZeRO stage 3): one bucket per unit of parameter names, in this order (Reducer::shard_buckets).
  void shard_buckets(int parts, const void* owner, bool release_gradients = false,
                     const std::vector<std::vector<std::string>>& units = {});
  // For the optimizer sharding the buckets (ZeRO stage 3 gathers the parameters outside any unit
  // here): `before` runs as every forward through this DDP begins -- forward(), call(), forward_as()
  // -- and `after` once it returned. Cleared when the owner lets go.
  void set_forward_callbacks(const void* owner, std::function<void()> before, std::function<void()> after);
  // The owner lets go (its destructor): the communication hook is DDPOptions::comm_hook again, and
  // the buffers persist again from the next backward. The buckets stay padded, which changes
  // nothing for an ordinary optimizer.
  void release_shard_owner(const void* owner);
  // Whether an optimizer shards the buckets now.
  bool buckets_sharded() const { return shard_owner_ != nullptr; }

  const DDPStats& stats() const;
  void reset_stats();
  std::vector<BucketInfo> buckets() const;

  // Compute and communication events of this rank (empty unless DDPOptions::trace), and a Chrome
  // trace of every rank's events gathered to rank 0 (collective; rank 0 writes `path`), the
  // profiler's op events among them when it keeps them (core/profiler.h).
  std::vector<TraceEvent> trace_events() const;
  void write_trace(const std::string& path);

 private:
  friend class NoSyncGuard;
  friend class Join;
  // Note [Join's agreement] (dist/ddp/join.h): what the ranks told each other at one forward.
  struct StepAgreement {
    int active = 0;     // ranks that still have data
    bool sync = false;  // whether this forward's backward will reduce gradients
    int root = 0;       // the lowest active rank: the buffers' source
  };
  StepAgreement agree_on_step(bool active, bool sync);  // collective: one allgather of two integers
  void sync_buffers(int root = 0);                      // broadcast root's buffers (when options_.broadcast_buffers)
  double begin_forward();                               // returns the trace clock at the start
  void end_forward(double start_us);
  [[noreturn]] void wrong_module_type(const char* requested) const;
  void install_step_check(const std::vector<std::pair<std::string, Tensor>>& params);
  std::shared_ptr<nn::Module> module_;
  std::vector<Tensor> buffers_;  // the module's buffers at construction, when they are broadcast
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<optim::StepCheckHandle> step_check_;    // Note [A step after no_sync]
  Join* join_ = nullptr;                                  // the Join this replica is in, if any
  const void* shard_owner_ = nullptr;                     // the optimizer sharding the buckets, if any
  std::function<void()> before_forward_, after_forward_;  // set_forward_callbacks
};

// Mixed precision across ranks: makes `scaler` combine its found-inf flag over the group (max), so
// that when any rank's gradients overflowed every rank skips the step, and the replicas stay equal.
void sync_found_inf(optim::GradScaler& scaler, std::shared_ptr<ProcessGroup> group);

// Training checkpoints across ranks: `checkpoint` writes on the group's rank 0 only, records the
// group's size, and every save ends with the ranks agreeing (a min allreduce) on whether the write
// succeeded, so that a failed write is an error on every rank. Every rank must call save.
void sync_checkpoint(optim::TrainingCheckpoint& checkpoint, std::shared_ptr<ProcessGroup> group);

}  // namespace ringgrad::dist
