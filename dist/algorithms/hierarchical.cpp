// The hierarchical AllReduce: three stages, the standard shape at scale (backend "hierarchical",
// dist/backends/hierarchical.cpp, which builds the Topology: what a "node" is).
//
//   1. reduce inside each node to its leader (node rank 0)      MPI_Ireduce on the node communicator
//   2. AllReduce among the leaders, one per node                 the pipelined ring (ring_pipeline.h)
//   3. broadcast inside each node from its leader                MPI_Ibcast on the node communicator
//
// Why: inside a node ranks share memory (or NVLink); between nodes there is one slower network.
// A flat ring over all N ranks crosses the network with 2(N-1)/N of the data per rank; here only
// leaders talk across nodes, so inter-node traffic falls by the number of ranks per node.
//
// Arithmetic: stages 1 and 2 run in the accumulation type (f32 for f16 / bf16, Note
// [Half-precision accumulation]); each leader divides once for AVG by the world size and rounds
// once, then broadcasts the tensor's own dtype (half the bytes for f16). Every rank of a node
// receives its leader's bits, and leaders agree bit for bit because the ring does.
#include <mpi.h>

#include <algorithm>
#include <type_traits>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/ring_pipeline.h"

namespace ringgrad::dist::detail {
namespace {

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
    const bool leader = topo_.node_rank == 0;
    RG_MPI_CHECK(MPI_Ireduce(leader ? MPI_IN_PLACE : work_, leader ? work_ : nullptr, static_cast<int>(n_),
                             mpi_type<Acc>(), mpi_op(op_), 0, topo_.node, &request_));
    stage_ = Stage::node_reduce;
  }

  bool poll() override {
    for (;;) {
      switch (stage_) {
        case Stage::node_reduce:
          if (!test()) return false;
          after_node_reduce();
          break;
        case Stage::leaders:
          if (!ring_->poll()) return false;
          ring_.reset();
          finish_and_broadcast();
          break;
        case Stage::node_broadcast:
          if (!test()) return false;
          stage_ = Stage::done;
          break;
        case Stage::done: return true;
      }
    }
  }

  void abandon() override {
    if (ring_) ring_->abandon();
    // An unfinished MPI_Ireduce / MPI_Ibcast cannot be cancelled; the group leaks it.
  }

 private:
  enum class Stage { node_reduce, leaders, node_broadcast, done };

  bool test() {
    int done = 0;
    RG_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

  void after_node_reduce() {
    if (topo_.node_rank != 0) {  // wait for the leader's result
      broadcast();
      return;
    }
    if (topo_.num_nodes > 1) {
      // AVG sums among leaders too; the leader divides by the world size once, below.
      const ReduceOp ring_op = op_ == ReduceOp::avg ? ReduceOp::sum : op_;
      ring_ = std::make_unique<RingPipeline<Acc>>(RingPipeline<Acc>::Mode::allreduce, n_, ring_op, 1,
                                                  Channel{topo_.leaders, topo_.leader_rank, topo_.num_nodes, tag_},
                                                  work_, work_, work_, slots_, tuning_, std::vector<Tensor>{});
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
    RG_MPI_CHECK(MPI_Ibcast(data_, static_cast<int>(n_ * sizeof(T)), MPI_BYTE, 0, topo_.node, &request_));
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
  Acc* slots_;  // the leaders' ring receive slots
  RingTuning tuning_;
  Stage stage_ = Stage::node_reduce;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::unique_ptr<RingPipeline<Acc>> ring_;
};

}  // namespace

std::unique_ptr<PendingOp> hierarchical_allreduce(const Tensor& t, ReduceOp op, int tag, const Topology& topo,
                                                  int world_size, Scratch& scratch, RingTuning tuning) {
  // The accumulation type is f32 for f16 / bf16 (Note [Half-precision accumulation]), else the dtype.
  const size_t acc_bytes = std::max<size_t>(dtype_size(t.dtype()), sizeof(float));
  const int64_t slots = tuning.slot_elems(acc_bytes);
  return with_accumulator(scratch, t, slots,
                          [&](auto zero, auto* work, auto* slot_buffer) -> std::unique_ptr<PendingOp> {
                            return std::make_unique<HierarchicalAllreduce<decltype(zero)>>(t, op, tag, topo, world_size,
                                                                                           work, slot_buffer, tuning);
                          });
}

}  // namespace ringgrad::dist::detail
