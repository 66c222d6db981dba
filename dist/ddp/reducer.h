// Reducer: the buckets, the backward hooks and the overlapped reductions behind
// DistributedDataParallel (internal; read dist/ddp/ddp.h first).
//
// Note [Bucket assignment]: parameters go into buckets in reverse registration order -- the order in
// which backward will (roughly) produce their gradients, last layer first -- filling a bucket until
// the next parameter would exceed its cap: first_bucket_mb for the first, bucket_cap_mb after. A
// bucket holds one dtype (a parameter of another dtype opens a bucket of its own). Small first
// bucket: its reduction can start after the last layer's backward, instead of waiting for 25 MiB
// of gradients. After the first synchronising backward the buckets are rebuilt once from the order
// gradients really became ready on rank 0 (broadcast, so that every rank builds the same buckets).
//
// Note [Buckets launch in index order]: collectives must be issued in the same order on every rank
// (Note [Collective order] in dist/process_group.h), but the order in which buckets become ready
// may differ between ranks (an op's gradient lands a little earlier here than there). So a bucket
// that is ready is launched only once every bucket with a smaller index has been launched; a ready
// bucket waits for its predecessors. Every rank thus issues bucket 0, 1, 2, ... in that order,
// whatever order readiness arrived in.
//
// Note [Gradients are bucket views]: each parameter's .grad is a view into its bucket's buffer, so
// backward accumulates straight into the buffer the AllReduce reads and writes, and the reduced
// result is the .grad the optimizer reads. After zero_grad(set_to_none) -- the optimizers' default --
// .grad is none. Each parameter's slot is its gradient destination (Note [Gradient destinations],
// autograd/accumulate_grad.h), so a linear layer's weight gradient is written by its GEMM straight
// into the bucket; any other fresh gradient (biases, conv weights, embeddings) is copied into the
// bucket by the hook, which makes the view the .grad again. (Re-attaching zeroed views before the
// forward instead costs a zero fill plus backward's read-add-write into them, ~10% of an MLP step.)
// With zero_grad(set_to_none = false), or across no_sync micro-batches, backward adds into the views.
//
// Note [Buckets for sharding]: an optimizer that shards the buckets across the N ranks
// (dist::ZeroOptimizer) gives rank r the contiguous elements [r m, (r + 1) m) of a bucket of N m
// elements, so each bucket is padded with zeros to a multiple of N (the padding takes part in the
// reductions and stays zero) -- reduce_scatter and allgather move equal blocks. Its shards, and the
// optimizer state laid on them, follow the bucket layout, so the layout stops changing: no rebuild
// from the observed order after that point.
//
// Note [Gradient buffers released after the reduction]: an optimizer that keeps only its block of
// the reduced gradient (ZeRO stage 2) has no use for the full-size buckets between steps, so it may
// ask for them to be released: each bucket's buffer is then allocated at the bucket's first gradient
// (plain memory, not shared: the reduce-scatter does not sum in place) and freed once that backward's
// reductions completed, leaving every .grad none. What persists per rank is the reduced blocks, 1/N
// of the gradient. Allocating bucket by bucket, rather than all at the backward's first gradient,
// keeps the later buckets out of the memory peak, which is early in backward, when the forward's
// activations are still alive. A no_sync backward keeps its buffers -- they hold the accumulated sums the next
// synchronising backward reduces. The hook must therefore reduce into storage of its own and add to
// it (a backward without zero_grad() adds to the gradient, as DDP's does).
//
// Note [no_sync]: whether a backward communicates is decided when its first gradient arrives, from
// the guard in force then. A non-synchronising backward only accumulates into the bucket views;
// the next synchronising one reduces the accumulated sums, so K micro-batches cost one reduction
// per bucket.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/options.h"
#include "dist/ddp/recorder.h"
#include "dist/process_group.h"

namespace ringgrad::dist {

class Reducer {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor>> named_params, std::shared_ptr<ProcessGroup> group,
          const DDPOptions& options);
  ~Reducer();

  void before_forward() { recorder_.forward_begins(); }  // the step clock, tracing
  void set_require_sync(bool on) { require_sync_ = on; }
  bool require_sync() const { return require_sync_; }
  // Whether the last finished backward ran under no_sync, so .grad holds this rank's micro-batches
  // only (Note [A step after no_sync], dist/ddp/ddp.cpp).
  bool gradients_unsynchronised() const { return gradients_unsynchronised_; }
  void set_comm_hook(CommHook hook) { hook_ = std::move(hook); }

  // Under dist::Join (Note [Join's agreement], dist/ddp/join.h). A forward announces how many ranks
  // contribute to its backward and whether that backward synchronises; a synchronising backward
  // then averages over the contributing ranks (Note [Join's divisor]) unless told to divide by the
  // group's size.
  void enter_join(bool divide_by_group_size) {
    in_join_ = true;
    divide_by_group_size_ = divide_by_group_size;
    contributing_ranks_ = group_->size();
  }
  void leave_join() { in_join_ = false; }
  void expect_backward(int contributing_ranks, bool sync) {
    contributing_ranks_ = contributing_ranks;
    announced_sync_ = sync;
  }
  // A rank out of data answers the others' synchronising backward: every bucket, in index order,
  // through the same hook, with zero gradients.
  void shadow_backward();

  // Statistics, trace and narration: Note [Steps recorded once reduced] in dist/ddp/recorder.h.
  ReducerRecorder& recorder() { return recorder_; }
  std::vector<BucketInfo> buckets() const;
  // Note [Buckets for sharding]: pads every bucket to a multiple of `parts` elements and keeps the
  // layout from now on; with `release_gradients`, Note [Gradient buffers released after the
  // reduction]. `units`, when given: one bucket per unit, holding exactly its parameters (by name;
  // every trainable parameter in one unit), in this order -- ZeRO stage 3's buckets are its units
  // (dist/zero/gathered_units.h). Collective (the buckets are rebuilt).
  void shard_buckets(int parts, bool release_gradients, const std::vector<std::vector<std::string>>& units = {});
  // Back to persistent buffers (the sharding optimizer is gone). Released ones are allocated at
  // their next gradient, in plain memory: allocating shared memory is collective, which a
  // destructor must not be.
  void keep_gradients() { release_after_sync_ = false; }

 private:
  struct Param {
    std::string name;
    Tensor tensor;
    int bucket = -1;
    int64_t offset = 0;  // elements into the bucket buffer
    bool ready = false;  // this backward
    int hook_handle = -1;
  };
  struct Arena {  // one buffer the buckets of a (dtype, device) are views of
    int64_t numel;
    DType dtype;
    Device device;
  };
  struct Bucket {
    GradBucket grad;  // index, buffer (undefined while released), names
    std::vector<int> params;
    int64_t numel = 0;  // the buffer's, padding included
    DType dtype = DType::f32;
    Device device;
    int arena = 0;      // which arena it lies in (when not released),
    int64_t start = 0;  // from which element
    int pending = 0;    // parameters not yet ready in this backward
    bool launched = false;
    HookWork work;
  };

  // Note [Bucket assignment]: `order` lists parameter indices, expected-ready first.
  void build_buckets(const std::vector<int>& order);
  // The buckets' buffers and parameter slots, for buckets holding these parameter indices.
  void lay_out_buckets(const std::vector<std::vector<int>>& members);
  // One tensor per arena, from ProcessGroup::new_reduction_buffer (collective).
  std::vector<Tensor> new_arenas(const std::vector<Arena>& arenas) const;
  // Points each bucket's buffer and each parameter's gradient destination into `arenas`; a gradient
  // that exists is copied into its slot.
  void attach_buffers(const std::vector<Tensor>& arenas);
  // Note [Gradient buffers released after the reduction]: a buffer of its own for one bucket, at its
  // first gradient; and every .grad none, the buffers freed, once reduced.
  void allocate_bucket(int index);
  void release_buffers();
  Tensor slot(const Param& p) const;  // p's view into its bucket, shaped like p
  bool is_bucket_view(const Param& p) const;
  void attach_view(Param& p);  // keeps the current gradient's value (zero when none)

  void on_gradient_ready(int index);  // the post-accumulate-grad hook
  void launch_ready_buckets();        // Note [Buckets launch in index order]
  void finish_backward();             // the end-of-backward callback
  void mark_unused_parameters();
  void rebuild_buckets_from_observed_order();
  std::vector<std::string> bucket_lines() const;  // one per bucket, for the narration

  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  CommHook hook_;

  bool require_sync_ = true;
  bool in_backward_ = false;  // a backward of this model has delivered its first gradient
  bool sync_this_backward_ = true;
  bool gradients_unsynchronised_ = false;
  int next_to_launch_ = 0;
  bool rebuilt_ = false;
  int64_t bucket_multiple_ = 1;      // Note [Buckets for sharding]
  bool release_after_sync_ = false;  // Note [Gradient buffers released after the reduction]
  // dist::Join
  bool in_join_ = false;
  bool divide_by_group_size_ = false;
  bool announced_sync_ = true;
  int contributing_ranks_ = 0;
  std::vector<int> observed_order_;  // first synchronising backward, hook order

  ReducerRecorder recorder_;  // statistics, trace, narration
};

}  // namespace ringgrad::dist
