// GatheredUnits: ZeRO stage 3's parameters -- each rank stores 1/N of every unit, and a unit's full
// parameters exist only while its forward or backward runs (internal to dist::ZeroOptimizer; read
// dist/zero/zero_optimizer.h first).
//
// Dimension letters: N world size, m the elements of one rank's block of a unit's bucket.
//
// Note [Units of stage 3]: a unit is a module whose parameters are gathered and released together
// (FSDP's wrapped module; ZeroOptions::units picks them, by default every child of an
// nn::Sequential that holds parameters -- GPT's blocks, an MLP's layers). The parameters in no unit
// form the root unit (GPT: wte, wpe, ln_f), gathered for the whole forward and backward, because
// the model's own forward may use them anywhere (GPT's head reuses wte's weight outside wte's
// forward). Each unit is one DDP bucket (DistributedDataParallel::shard_buckets with units), laid
// out as stages 1 and 2 lay out any bucket (Note [Shards cut across parameters]): N m elements,
// rank r's block the m from r m.
//
// Note [Gather, use, release]: per unit,
//   full  (N m) -- the parameters are views of it (Tensor::move_into), so the model, the graph's
//                  saved tensors and the kernels all read it; its memory is released between uses
//                  (Note [Released storage], core/storage.h) and a read then throws, naming the unit.
//   shard (m)   -- this rank's block, persistent: what the optimizer steps (its pieces are views of
//                  it), so a step ends with no allgather.
// Forward: the unit's forward pre-hook gathers it (an allgather of the shards into full, waiting
// for the one prefetched) and prefetches the next unit in forward order; its forward hook releases
// it, and with grad mode on passes the output through an identity node whose backward gathers the
// unit again (and prefetches the unit before it) before any of the unit's backward nodes run --
// they are all upstream of the output. The unit is released again as soon as every gradient of
// its parameters is final (their post-accumulate-grad hooks counted, so also under no_sync; no node
// reads them after that), and whatever is still gathered at the end of a backward is released then
// (a parameter left unused). The root unit is gathered as a forward through DDP (or the root
// module) begins and held for the backward of a forward with grad mode; a forward without grad
// mode releases it after, unless a backward still holds it. A step changes the shards, so it
// releases every unit first: the next forward gathers the new values. With ZeroOptions::reshard_after_forward off, a forward with grad mode
// keeps each unit gathered (held, no identity node) until its gradients are final.
//
// Why the collectives match across ranks: every gather and prefetch is issued at the same point of
// the same program on every rank -- forward hooks in module order, backward nodes in the engine's
// deterministic order -- interleaved with the reducer's bucket launches, which follow that order too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/process_group.h"

namespace ringgrad::dist {

// What the gathers cost, since construction or reset: the allgathers issued, the bytes they
// brought in (the whole unit, N m elements), and the time the training thread waited for them --
// the part a prefetch did not hide (exposed), as DDP's statistics count exposed communication.
struct GatherStats {
  int64_t allgathers = 0;
  int64_t bytes = 0;
  double exposed_ms = 0;
};

class GatheredUnits : public std::enable_shared_from_this<GatheredUnits> {
 public:
  struct Unit {
    std::string name;               // the module's path ("h.0"), or "(root)"
    int bucket = 0;                 // its DDP bucket
    Tensor full;                    // (N m): the parameters live here; released between uses
    Tensor shard;                   // (m): this rank's block
    std::shared_ptr<Work> pending;  // a prefetch in flight
    std::string released_why;       // what a read of the released parameters is told
    int num_params = 0;             // its parameters that take part in backward
    int params_left = 0;            // of them, those whose gradient is not final in this backward
    bool held = false;              // kept gathered for a backward to come (see hold())
  };

  GatheredUnits(ProcessGroup& group, std::vector<Unit> units, bool has_root);
  ~GatheredUnits();  // waits for a prefetch still writing into a buffer
  GatheredUnits(const GatheredUnits&) = delete;
  GatheredUnits& operator=(const GatheredUnits&) = delete;

  int size() const { return static_cast<int>(units_.size()); }
  const Unit& unit(int u) const { return units_.at(u); }
  int root() const { return has_root_ ? 0 : -1; }  // the root unit comes first, when it has parameters
  int unit_of_bucket(int bucket) const { return unit_of_bucket_.at(bucket); }

  void gather(int u);    // collective: the unit's full parameters, now
  void prefetch(int u);  // collective: starts gathering the unit (no-op if gathered or in flight)
  void release(int u);   // local: waits for a prefetch in flight, gives the memory back
  void release_all();
  // A forward with grad mode keeps u gathered for its backward (the root; a unit when
  // reshard_after_forward is off): a later forward without grad mode leaves it gathered. Cleared by
  // release().
  void hold(int u) { units_.at(u).held = true; }
  bool held(int u) const { return units_.at(u).held; }
  // Backward: the first event of a backward (an identity node, a parameter's gradient) starts the
  // count of each unit's gradients still to come and queues the end-of-backward release of whatever
  // is still gathered; a unit whose gradients are all final is released at once -- no node reads its
  // parameters after that, whether or not the backward reduces (no_sync).
  void backward_event();
  void parameter_ready(int u);
  void gather_all();
  // Copies this rank's block of every gathered unit back into its shard (parameters written while
  // gathered -- a loaded state dict -- become what the optimizer steps).
  void write_back();
  bool gathered(int u) const { return !units_.at(u).full.storage()->released(); }

  // The unit after / before u in forward order among the non-root units (-1: none).
  int next(int u) const { return u + 1 < size() && u != root() ? u + 1 : -1; }
  int previous(int u) const { return u - 1 >= 0 && u - 1 != root() && u != root() ? u - 1 : -1; }

  // Bytes of full parameters gathered now, and the most at once since the last reset.
  size_t gathered_bytes() const { return gathered_bytes_; }
  size_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes_; }
  void restore_peak(size_t peak) { peak_gathered_bytes_ = std::max(peak, gathered_bytes_); }
  size_t shard_bytes() const;
  const GatherStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }
  // The optimizer is gone: a gathered_parameters() scope that ends after it leaves the units gathered.
  bool orphaned = false;

 private:
  void materialize(Unit& unit);
  // Waits for u's allgather in flight; if it fails, the buffer is released (its contents are not the
  // parameters) before the error goes on.
  void finish_pending(Unit& unit, bool count_as_exposed);
  ProcessGroup& group_;
  std::vector<Unit> units_;
  std::vector<int> unit_of_bucket_;
  bool has_root_;
  size_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  GatherStats stats_;
};

}  // namespace ringgrad::dist
