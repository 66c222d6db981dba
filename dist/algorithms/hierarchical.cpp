// The hierarchical AllReduce: three stages, the standard shape at scale (backend "hierarchical",
// dist/backends/hierarchical.cpp, which builds the Topology: what a "node" is).
//
//   1. reduce inside each node to its leader (node rank 0)      a binomial tree of point-to-point messages
//   2. AllReduce among the leaders, one per node                 the pipelined ring (ring_pipeline.cpp)
//   3. broadcast inside each node from its leader                the same tree, the other way
//
// Why: inside a node ranks share memory (or NVLink); between nodes there is a slower network. What
// the two levels save is inter-node latency, far more than inter-node bytes. Take M nodes of k
// ranks, N = M k, numbered node by node, and S the tensor's bytes. A flat ring over all N ranks
// crosses the network on only M of its links, each carrying 2(N-1)/N S, in 2(N-1) steps that each
// wait on the slowest link, an inter-node one. The leaders' ring (stage 2) also crosses it on M
// links, each carrying 2(M-1)/M S, in 2(M-1) steps. So the bytes per inter-node link fall by less
// than a factor of 2 whatever k (nearly 2 at M = 2, hardly at all across many nodes), while the
// steps that wait on the network fall from 2(N-1) to 2(M-1), at least k times fewer. For f16 / bf16
// the leaders' ring carries f32 in every step (stage 1 already summed in f32): 4(M-1)/M S per link,
// against the flat ring's (3N-4)/N S (Note [Each chunk is reduced once] in ring_pipeline.cpp) -- with
// 4 nodes or more, more bytes than the flat ring, not fewer.
//
// The price: the three stages run one after the other over the whole tensor. Only the leader talks
// across nodes -- but a flat ring numbered node by node crosses them on one link per node too, so
// where every rank has a network interface of its own (one per GPU on most GPU servers) neither
// uses more than one of a node's k. Keeping every interface busy takes another shape:
// reduce-scatter within the node, an AllReduce across nodes of each local rank's 1/k share with its
// peers of the same local rank (k rings of M ranks, 2(M-1)/M S/k per interface), then an all-gather
// within the node -- Horovod's hierarchical AllReduce. This file does not do that.
//
// Arithmetic: stages 1 and 2 run in the accumulation type (f32 for f16 / bf16, Note
// [Half-precision accumulation]); each leader divides once for AVG by the world size and rounds
// once, then broadcasts the tensor's own dtype (half the bytes for f16). Every rank of a node
// receives its leader's bits, and leaders agree bit for bit because the ring does.
#include <mpi.h>

#include <algorithm>
#include <type_traits>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/network_model.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {
namespace {

// Note [In-node stages over point-to-point]: the reduce to the leader and the broadcast from it are
// binomial trees of whole-tensor messages on the node communicator, posted and tested by the
// communication thread like every other message here, rather than MPI's MPI_Ireduce / MPI_Ibcast.
// A nonblocking MPI collective advances only inside MPI calls, round by round of its internal
// segments, and with the thread polling between sleeps (Note [Polling, not spinning]) a 64 MiB
// MPI_Ireduce took 2.4 s at 4 ranks on 2 cores, against 55 ms for the whole flat ring. The trees
// also send exactly the messages the cost model counts: ceil(log2 k) of the tensor each way.
//
// Reduce: in step j (mask 2^j), a rank with bit j set sends its partial sums to rank - mask and is
// done; a rank without it receives from rank + mask (when there is one) and adds. Broadcast: a rank
// receives from the rank that differs in its lowest set bit, then sends to rank + mask for every
// lower mask.
struct NodeMessage {
  int peer;
  bool send;
};

std::vector<NodeMessage> node_reduce_schedule(int rank, int size) {
  std::vector<NodeMessage> out;
  for (int mask = 1; mask < size; mask <<= 1) {
    if (rank & mask) {
      out.push_back({rank - mask, true});
      break;
    }
    if (rank + mask < size) out.push_back({rank + mask, false});
  }
  return out;
}

std::vector<NodeMessage> node_broadcast_schedule(int rank, int size) {
  std::vector<NodeMessage> out;
  int mask = 1;
  while (mask < size) {
    if (rank & mask) {
      out.push_back({rank - mask, false});
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (rank + mask < size) out.push_back({rank + mask, true});
  return out;
}

template <class T>
class HierarchicalAllreduce : public PendingOp {
  using Acc = compute_t<T>;

 public:
  HierarchicalAllreduce(const Tensor& t, ReduceOp op, int tag, const Topology& topo, int world_size, Acc* work,
                        Acc* slots, RingTuning tuning)
      : tensor_(t),
        op_(op),
        tag_(tag),
        topo_(topo),
        world_size_(world_size),
        n_(t.numel()),
        data_(static_cast<T*>(t.raw_data())),
        work_(work),
        slots_(slots),
        tuning_(tuning) {
    if (topo_.node_size == 1) {
      after_node_reduce();
      return;
    }
    messages_ = node_reduce_schedule(topo_.node_rank, topo_.node_size);
    stage_ = Stage::node_reduce;
  }

  bool poll() override {
    for (;;) {
      switch (stage_) {
        case Stage::node_reduce:
          if (!advance_node_messages()) return false;
          after_node_reduce();
          break;
        case Stage::leaders:
          if (!ring_->poll()) return false;
          ring_.reset();
          finish_and_broadcast();
          break;
        case Stage::node_broadcast:
          if (!advance_node_messages()) return false;
          stage_ = Stage::done;
          break;
        case Stage::done: return true;
      }
    }
  }

  void abandon() override {  // See Note [After a timeout] in dist/comm_thread.h
    if (ring_) ring_->abandon();
    if (request_ != MPI_REQUEST_NULL) abandon_request(request_, !messages_.at(next_ - 1).send);
  }

 private:
  enum class Stage { node_reduce, leaders, node_broadcast, done };

  // Note [In-node stages over point-to-point]: posts the stage's messages one after the other;
  // true once the last has completed.
  bool advance_node_messages() {
    for (;;) {
      if (request_ != MPI_REQUEST_NULL) {
        int done = 0;
        RG_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));  // sets request_ to NULL when done
        if (!done) return false;
        const NodeMessage& m = messages_[next_ - 1];
        if (stage_ == Stage::node_reduce && !m.send) reduce_into(work_, slots_, n_, op_);
      }
      if (next_ == messages_.size()) return true;
      const NodeMessage& m = messages_[next_++];
      const bool reduce = stage_ == Stage::node_reduce;
      // Reduce: partial sums as Acc; broadcast: the finished tensor as T (as bytes: f16 has no MPI type).
      void* buffer = reduce ? static_cast<void*>(m.send ? work_ : slots_) : static_cast<void*>(data_);
      const int count = static_cast<int>(reduce ? n_ : n_ * static_cast<int64_t>(sizeof(T)));
      const MPI_Datatype type = reduce ? mpi_type<Acc>() : MPI_BYTE;
      if (m.send) {
        pay_for_message(topo_.node, m.peer, reduce ? n_ * sizeof(Acc) : n_ * sizeof(T));  // Note [A price per message]
        RG_MPI_CHECK(MPI_Isend(buffer, count, type, m.peer, tag_, topo_.node, &request_));
      } else {
        RG_MPI_CHECK(MPI_Irecv(buffer, count, type, m.peer, tag_, topo_.node, &request_));
      }
    }
  }

  void after_node_reduce() {
    if (topo_.node_rank != 0) {  // wait for the leader's result
      broadcast();
      return;
    }
    if (topo_.num_nodes > 1) {
      // AVG sums among leaders too; the leader divides by the world size once, below.
      const ReduceOp ring_op = op_ == ReduceOp::avg ? ReduceOp::sum : op_;
      ring_ = ring_allreduce_sums(work_, n_, ring_op, Channel{topo_.leaders, topo_.leader_rank, topo_.num_nodes, tag_},
                                  slots_, tuning_);
      stage_ = Stage::leaders;
      return;
    }
    finish_and_broadcast();
  }

  void finish_and_broadcast() {
    if (!std::is_same_v<T, Acc> || op_ == ReduceOp::avg) finish_into(data_, work_, n_, op_, world_size_);
    broadcast();
  }

  void broadcast() {
    if (topo_.node_size == 1) {
      stage_ = Stage::done;
      return;
    }
    messages_ = node_broadcast_schedule(topo_.node_rank, topo_.node_size);
    next_ = 0;
    stage_ = Stage::node_broadcast;
  }

  Tensor tensor_;  // keeps the storage alive
  ReduceOp op_;
  int tag_;
  Topology topo_;
  int world_size_;
  int64_t n_;
  T* data_;
  Acc* work_;   // (n) partial results; data_ itself when T == Acc
  Acc* slots_;  // the leaders' ring receive slots; before the ring, a child's partial sums (n)
  RingTuning tuning_;
  Stage stage_ = Stage::node_reduce;
  std::vector<NodeMessage> messages_;  // this in-node stage's, in order
  size_t next_ = 0;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::unique_ptr<PendingOp> ring_;  // the leaders' pipelined ring (ring_pipeline.cpp)
};

}  // namespace

std::unique_ptr<PendingOp> hierarchical_allreduce(const Tensor& t, ReduceOp op, int tag, const Topology& topo,
                                                  int world_size, Scratch& scratch, RingTuning tuning) {
  // The accumulation type is f32 for f16 / bf16 (Note [Half-precision accumulation]), else the dtype.
  const size_t acc_bytes = std::max<size_t>(dtype_size(t.dtype()), sizeof(float));
  // The slots serve the leaders' ring, and before it the in-node reduce's receives: n elements
  // (Note [In-node stages over point-to-point]). Scratch memory, kept from op to op.
  const int64_t slots = std::max<int64_t>(tuning.slot_elems(acc_bytes), topo.node_size > 1 ? t.numel() : 0);
  return with_accumulator(scratch, t, slots,
                          [&](auto zero, auto* work, auto* slot_buffer) -> std::unique_ptr<PendingOp> {
                            return std::make_unique<HierarchicalAllreduce<decltype(zero)>>(t, op, tag, topo, world_size,
                                                                                           work, slot_buffer, tuning);
                          });
}

}  // namespace ringgrad::dist::detail
