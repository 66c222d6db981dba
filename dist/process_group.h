// ProcessGroup: the collectives data parallelism needs, each asynchronous.
//
// N is the world size. Tensors must be defined, contiguous, of dtype f32, f64, f16, bf16, i32 or i64
// (allreduce, reduce_scatter) or any dtype (broadcast, allgather, send / recv: they move bytes).
// They may be on the CPU or, in a build with CUDA, on this rank's GPU: the MPI-based backends stage
// GPU tensors through host memory (Note [CUDA tensors through host staging]), and `nccl` moves GPU
// memory itself and stages CPU tensors through its GPU.
//
//   auto pg = dist::new_group("auto");                 // a shared_ptr, as DDP takes it; or "mpi", "ring", "tree", "hierarchical"
//   auto work = pg->allreduce(grad, dist::ReduceOp::avg);
//   ... compute ...
//   work->wait();                                      // grad now holds the mean over ranks
//
// Note [Collective order]: every rank must issue the same collectives on a group in the same order
// (same op, same element count, same dtype, same root). Each group runs its collectives one at a
// time, in submission order, on its own communication thread, so the k-th collective of rank 0
// meets the k-th collective of every other rank. A rank that skips or reorders one makes the others
// wait: after the group's timeout (default 300 s, RINGGRAD_COLLECTIVE_TIMEOUT seconds, or
// GroupOptions::timeout_seconds) their wait() throws an error naming the rank, the op, its sequence
// number, its byte count and the backend. The group is then unusable (later collectives fail at
// once); create a new one, or better end the job. Two groups are independent: each has its own
// communicator (MPI_Comm_dup) and thread. RINGGRAD_DIST_DEBUG=1 makes every collective first check
// that all ranks are issuing the same one (Note [Debug mode] in dist/group_base.h).
//
// send / recv are not collectives: only the two ranks involved issue them, so they take no part in
// the collective order. They start in submission order but run concurrently with each other and
// with the running collective (a send and a receive posted back to back on two ranks cannot
// deadlock), each under the same timeout. A send matches the receive of the same (src, dst, tag) in
// order.
//
// Note [Where AVG divides]: ReduceOp::avg sums in the accumulation type, then divides by N once,
// just before rounding to the tensor's dtype: in `ring`, by the rank that owns each chunk after the
// reduce-scatter (so every rank receives identical bits); in `tree` and `mpi`, by every rank after
// the sum; in `hierarchical`, by each node leader before it broadcasts to its node. Integer dtypes
// divide with C++ truncation toward zero.
//
// Note [Half-precision accumulation]: f16 and bf16 are summed in f32 and rounded once at the end,
// so the result does not depend on N's order of additions at 11 (8) bits. `ring` sends f32 partial
// sums during its reduce-scatter and f16/bf16 in its all-gather; `mpi` reduces an f32 copy.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/trace.h"
#include "dist/compression/wire_format.h"
#include "dist/work.h"

namespace ringgrad::dist {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", ...

// A slower network than the one there is, for experiments (GroupOptions::simulated_network): an
// operation of b bytes counts as finished no earlier than latency_us + b / bandwidth after it
// started, and runs until then, so like a real link it also holds back the operations queued
// behind it -- which is what makes overlap visible on one machine, where the loopback "network" is
// a memcpy (Note [Simulated network] in dist/simulated_network.h). 0 switches a term off.
struct SimulatedNetwork {
  double bandwidth_gbps = 0;  // GB/s of tensor bytes
  double latency_us = 0;
};

struct GroupOptions {
  // Seconds one operation may run before wait() throws. Unset: RINGGRAD_COLLECTIVE_TIMEOUT, else 300.
  std::optional<double> timeout_seconds;
  // The communication thread sleeps at most this long between polls of an unfinished operation.
  // See Note [Polling, not spinning] in dist/comm_thread.h.
  int max_poll_sleep_us = 100;
  // ring: segment size of the pipeline (Note [Ring pipelining] in dist/algorithms/ring_pipeline.cpp).
  size_t ring_segment_bytes = size_t{1} << 20;
  // auto: AllReduces below this many bytes use the tree, the rest the ring. Unset:
  // RINGGRAD_AUTO_THRESHOLD (bytes, K/M suffixes allowed), else kAutoThresholdBytes.
  std::optional<size_t> auto_threshold_bytes;
  // hierarchical: ranks per "node". Unset: RINGGRAD_RANKS_PER_NODE, else the real machines
  // (MPI_COMM_TYPE_SHARED). Setting it lets one machine pretend to be several: ranks
  // [0, k) are node 0, [k, 2k) node 1, ...
  std::optional<int> ranks_per_node;
  // Check before each collective that every rank issues the same one. Unset: RINGGRAD_DIST_DEBUG.
  std::optional<bool> debug_check;
  // Model a slower network (see SimulatedNetwork). Unset: RINGGRAD_SIMULATED_NETWORK="GBPS,LATENCY_US".
  std::optional<SimulatedNetwork> simulated_network;
  // Record a TraceEvent per operation (trace_events()). Unset: on when RINGGRAD_DIST_TRACE names a
  // file prefix; the group then writes PREFIX.rank<r>.g<k>-<backend>.json (k: the group's number in
  // this process) when destroyed.
  std::optional<bool> trace;
  // tree, auto: small AllReduces through shared memory when every rank is on one machine (Note
  // [Shared-memory AllReduce] in dist/shm/slots.h). Unset: RINGGRAD_DIST_SHM, else on.
  std::optional<bool> shared_memory;
  // MPI backends: stage CPU tensors through a host copy as GPU tensors are, and offer no in-place
  // shared-memory buffers, so that a machine without a GPU runs the GPU path's staging (Note [Host
  // staging without a GPU] in dist/staging.h). For tests; nccl ignores it. Unset:
  // RINGGRAD_DIST_HOST_STAGING, else off.
  std::optional<bool> host_staging;
};

// How ProcessGroup::allreduce_low_precision encodes (Note [Low-precision ring] in
// dist/algorithms/low_precision_ring.cpp).
struct LowPrecisionAllreduce {
  WireFormat wire = WireFormat::bf16;
  int64_t scale_block = kDefaultScaleBlock;  // FP8: elements per scale (Note [Scaled FP8 blocks])
  // Optional, (numel) f32 contiguous on the CPU: added to the tensor before anything is encoded,
  // and on completion what this rank's encodings dropped (Note [Error feedback]).
  Tensor error_feedback;
};
// The bytes rank `rank` of `world_size` sends for allreduce_low_precision of n values, or with
// reduce_scatter_only for reduce_scatter_low_precision of an n-element input.
WireBytes low_precision_ring_sends(WireFormat format, int64_t n, int world_size, int rank,
                                   int64_t scale_block = kDefaultScaleBlock, bool reduce_scatter_only = false);

// The measured crossover of tree and ring on one machine (docs/dist.md, "auto").
inline constexpr size_t kAutoThresholdBytes = size_t{64} << 10;

// Counters of one process group, since creation (this rank's view).
struct GroupStats {
  uint64_t ops = 0;         // operations finished (collectives and send / recv)
  uint64_t failed = 0;      // of which failed or timed out
  uint64_t bytes = 0;       // this rank's tensor bytes over finished operations
  double busy_seconds = 0;  // wall time during which at least one operation was running
};

// The bytes this process sent in ringgrad's own messages since dist::init, every group together, by
// where the receiving rank runs: this machine (MPI carries them through shared memory) or another
// (the network). What the MPI library sends inside its own collectives, and shared-memory buffers
// reduced in place, send no message of ours and are not in it (Note [Bytes by transport] in
// dist/algorithms/network_model.h).
struct TransportBytes {
  uint64_t same_machine = 0;
  uint64_t other_machines = 0;
};
TransportBytes transport_bytes();

class ProcessGroup {
 public:
  // Every group registers itself while it lives, so that finalize() can refuse to end MPI under a
  // group whose communication thread still uses it (live_groups below).
  ProcessGroup();
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& backend() const = 0;  // "mpi", "ring", ...
  virtual double timeout_seconds() const = 0;

  // t: any shape; every rank's t becomes op over all ranks' t, elementwise.
  virtual std::shared_ptr<Work> allreduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // t: any shape; every rank's t becomes root's t.
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  // input: S (any shape); output: N * input.numel() contiguous elements of input's dtype, shaped
  // (N, *S) or, as PyTorch's all_gather_into_tensor also takes, (N * S0, S1, ...): the ranks'
  // inputs concatenated along dim 0 (for a 1-D input, (N * k)). Block r of output becomes rank r's
  // input. input may be block `rank` of output itself (in place). In place inside a buffer from new_reduction_buffer
  // that is shared memory, the blocks are copied between the ranks' buffers with no message (Note
  // [Allgather in a shared buffer] in dist/shm/reduction_buffer.h); every rank must then call it in
  // place on its own buffer, as for an AllReduce there.
  virtual std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input) = 0;
  // input: N * m elements (e.g. (N, *S)), output: m elements of input's dtype. Rank r's output
  // becomes op over all ranks of block r of input (elements [r m, (r + 1) m)); input is unchanged.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                               ReduceOp op = ReduceOp::sum) = 0;
  // t: (any shape) f32, f16 or bf16 on the CPU; op: sum or avg. Every rank's t becomes op over
  // all ranks' t, with every message in how.wire -- bf16, or FP8 with a scale per block -- and every
  // sum formed in f32: each partial sum is rounded to the wire format once per hop, the result
  // once more (Note [Low-precision ring]). With how.error_feedback, what this rank's encodings
  // dropped is kept to be added next time (Note [Error feedback]). The MPI backends run it over
  // point-to-point messages, also on one machine (no shared-memory path); others refuse it.
  virtual std::shared_ptr<Work> allreduce_low_precision(const Tensor& t, ReduceOp op, const LowPrecisionAllreduce& how);
  // reduce_scatter's shapes (input N * m elements, output m, input unchanged) and
  // allreduce_low_precision's wire: rank r's output becomes op over ranks of input block r, the
  // partial sums sent in how.wire and added in f32, N-1 roundings (no final one: the owner keeps
  // its sum). how.error_feedback: (N * m) f32, as the input. ZeRO stages 2 and 3 reduce with it
  // when ZeroOptions::reduce_scatter_wire is set. The MPI backends; others refuse it.
  virtual std::shared_ptr<Work> reduce_scatter_low_precision(const Tensor& output, const Tensor& input, ReduceOp op,
                                                             const LowPrecisionAllreduce& how);
  // Completes once every rank has issued it.
  virtual std::shared_ptr<Work> barrier() = 0;
  // Point-to-point: t's bytes to rank dst / from rank src, tag in [0, 32767]. The receiving
  // tensor must have exactly the sent byte count (an error names both otherwise).
  virtual std::shared_ptr<Work> send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(const Tensor& t, int src, int tag = 0) = 0;

  // A zero-filled 1-D tensor of `numel` elements for data this group will AllReduce again and again
  // (DDP's gradient buckets). Where the group can, it lives in memory that every rank of the machine
  // maps, and an AllReduce of it -- or of a view into it -- sums across the ranks' buffers in place,
  // with no copy and no message (Note [Shared gradient buffers] in dist/shm/reduction_buffer.h;
  // backends "tree" and "auto" on one machine, unless shared memory is switched off). Otherwise it
  // is an ordinary tensor. Either way it behaves like one. Collective: every rank calls it with the
  // same arguments in the same order, and reduces its own buffer where the others reduce theirs.
  virtual Tensor new_reduction_buffer(int64_t numel, DType dtype, Device device = Device::cpu());
  // Collective, with the same `bytes` on every rank: lets reduce_scatter of CPU inputs go through a
  // buffer of `bytes` every rank of the machine maps instead of messages, in rounds when an input
  // is larger (Note
  // [Reduce-scatter through a shared buffer] in dist/shm/reduction_buffer.h; "tree" and "auto" on
  // one machine, unless shared memory is switched off). Costs `bytes` of shared memory per rank,
  // for the group's life; a larger reservation replaces a smaller one. Returns whether the path is
  // taken (false on every rank elsewhere).
  virtual bool reserve_reduce_scatter_staging(int64_t bytes) {
    (void)bytes;
    return false;
  }
  // Whether an AllReduce of t on this group sums it in place across the ranks' shared buffers
  // (t lies in one from new_reduction_buffer that is shared memory), rather than over messages.
  virtual bool reduces_in_place(const Tensor& t) const {
    (void)t;
    return false;
  }
  // Whether new_reduction_buffer can give buffers on `device` that live in shared memory, and
  // reserve_reduce_scatter_staging can take inputs there: a question to ask before collective work
  // that would be wasted otherwise.
  virtual bool offers_shared_memory(Device device) const {
    (void)device;
    return false;
  }
  // Whether the group's reductions add values of `dtype` in that dtype, rounding at every addition
  // (nccl's f16 and bf16), rather than in its accumulation type and rounding once (the MPI
  // backends: Note [Half-precision accumulation]). See Note [Averaging half precision] in
  // dist/ddp/comm_hook.h.
  virtual bool adds_in_dtype(DType dtype) const {
    (void)dtype;
    return false;
  }

  // Observability: counters, and the trace events recorded when tracing is on (empty otherwise).
  virtual GroupStats stats() const = 0;
  virtual std::vector<TraceEvent> trace_events() const = 0;
};

// A process group over all ranks of the world, with the backend named at run time (each is
// dist/backends/<name>.cpp; the algorithms they run are in dist/algorithms/):
//   "mpi"          the MPI library's nonblocking collectives (MPI_Iallreduce, ...)
//   "ring"         pipelined ring reduce-scatter + all-gather over MPI point-to-point
//                  (dist/algorithms/ring.cpp)
//   "tree"         AllReduce for small messages: through shared memory when every rank is on one
//                  machine (dist/shm/slots.h), else recursive doubling (dist/algorithms/tree.cpp);
//                  the rest MPI's
//   "auto"         tree below GroupOptions::auto_threshold_bytes, ring above
//   "hierarchical" reduce within each node, ring among node leaders, broadcast within each node
//                  (dist/algorithms/hierarchical.cpp)
// Collective: every rank must call it, in the same order as other group creations.
std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const GroupOptions& options = {});

// The groups alive in this process, in creation order: "'ring'" for one new_group("ring") made, a
// description for the groups backends build inside theirs ("auto" holds a ring and a tree).
std::vector<std::string> live_groups();

// RINGGRAD_COLLECTIVE_TIMEOUT as seconds, or 300 when unset. Throws on a malformed value.
double default_collective_timeout();

}  // namespace ringgrad::dist
