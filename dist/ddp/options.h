// What DistributedDataParallel is configured with (DDPOptions) and what it reports back (DDPStats,
// BucketInfo) (public; dist/ddp/ddp.h includes it). Shared by the wrapper (dist/ddp/ddp.h) and the
// Reducer (dist/ddp/reducer.h), so that neither includes the other's header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "dist/ddp/comm_hook.h"

namespace ringgrad::dist {

struct DDPOptions {
  double bucket_cap_mb = 25;   // bucket size limit (MiB); a larger parameter gets a bucket of its own
  double first_bucket_mb = 1;  // the first bucket is small so that communication starts early
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
  // Narrate this many synchronising backwards on stderr, from rank 0 (the ranks run the same step):
  // each gradient as it becomes ready, its bucket, the bucket's launch and its reduction
  // (dist/ddp/explain.h). RINGGRAD_EXPLAIN=n in the environment sets it too.
  int explain_steps = 0;
};

// Where the time of one optimizer step went, on this rank. A step ends with a synchronising
// backward; it begins at the first forward after the previous step ended.
struct DDPStepTimes {
  double compute_ms = 0;            // first forward -> end of the last backward's computation
  double comm_ms = 0;               // sum over buckets of their reductions' time on the communication thread
  double exposed_comm_ms = 0;       // end of backward's computation -> every reduction done (what waiting cost)
  double overlap_percent() const {  // share of communication hidden behind computation
    return comm_ms > 0 ? 100.0 * std::max(0.0, 1.0 - exposed_comm_ms / comm_ms) : 100.0;
  }
};

struct DDPStats {
  int64_t steps = 0;  // synchronising backwards
  int64_t bucket_reductions = 0;
  int64_t bytes_reduced = 0;    // bucket bytes handed to the comm hook
  DDPStepTimes total;           // summed over steps
  DDPStepTimes last;            // the last step
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
  // The buffer lives from step to step -- false when a sharding optimizer has it allocated for each
  // backward and freed once reduced (Note [Gradient buffers released after the reduction],
  // dist/ddp/reducer.h).
  bool persistent = true;
};

}  // namespace ringgrad::dist
