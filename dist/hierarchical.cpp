// Backend "hierarchical": AllReduce in three stages, the standard shape at scale.
//
//   1. reduce inside each node to its leader (node rank 0)      MPI_Ireduce on the node communicator
//   2. AllReduce among the leaders, one per node                 the pipelined ring (ring_pipeline.h)
//   3. broadcast inside each node from its leader                MPI_Ibcast on the node communicator
//
// Why: inside a node ranks share memory (or NVLink); between nodes there is one slower network.
// A flat ring over all N ranks crosses the network with 2(N-1)/N of the data per rank; here only
// leaders talk across nodes, so inter-node traffic falls by the number of ranks per node.
//
// What a "node" is: by default the ranks sharing a machine (MPI_COMM_TYPE_SHARED). Setting
// GroupOptions::ranks_per_node or RINGGRAD_RANKS_PER_NODE=k declares ranks [0, k) node 0, [k, 2k)
// node 1, ... -- so one machine can test (and teach) the multi-node path. The last node may be
// smaller.
//
// Arithmetic: stages 1 and 2 run in the accumulation type (f32 for f16 / bf16, Note
// [Half-precision accumulation]); each leader divides once for AVG by the world size and rounds
// once, then broadcasts the tensor's own dtype (half the bytes for f16). Every rank of a node
// receives its leader's bits, and leaders agree bit for bit because the ring does. Broadcast,
// all-gather and reduce-scatter are MPI's over the whole group (GroupBase defaults).
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "dist/algorithms.h"
#include "dist/backends.h"
#include "dist/group_base.h"
#include "dist/ring_pipeline.h"

namespace ringgrad::dist::detail {
namespace {

// 0 means "the real machines".
int ranks_per_node_from(const GroupOptions& options) {
  if (options.ranks_per_node) {
    RG_CHECK(*options.ranks_per_node > 0, "dist.new_group", "ranks_per_node must be positive, got ",
             *options.ranks_per_node);
    return *options.ranks_per_node;
  }
  const char* env = std::getenv("RINGGRAD_RANKS_PER_NODE");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  RG_CHECK(end != env && *end == '\0' && k > 0, "dist.new_group", "RINGGRAD_RANKS_PER_NODE='", env,
           "' is not a positive integer");
  return static_cast<int>(k);
}

struct Topology {
  MPI_Comm node = MPI_COMM_NULL;     // the ranks of this node
  MPI_Comm leaders = MPI_COMM_NULL;  // node leaders only (MPI_COMM_NULL elsewhere)
  int node_rank = 0, node_size = 1;
  int leader_rank = 0, num_nodes = 1;  // valid on leaders
};

template <class T>
class HierarchicalAllreduce : public PendingOp {
  using Acc = compute_t<T>;

 public:
  HierarchicalAllreduce(const Tensor& t, ReduceOp op, int tag, const Topology& topo, int world_size, Acc* work,
                        Acc* slots, RingTuning tuning)
      : tensor_(t), op_(op), tag_(tag), topo_(topo), world_size_(world_size), n_(t.numel()),
        data_(static_cast<T*>(t.raw_data())), work_(work), slots_(slots), tuning_(tuning) {
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
        case Stage::done:
          return true;
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

class HierarchicalGroup final : public GroupBase {
 public:
  explicit HierarchicalGroup(const GroupOptions& options) : GroupBase("hierarchical", options) {
    const int k = ranks_per_node_from(options);
    if (k > 0) {
      RG_MPI_CHECK(MPI_Comm_split(comm_, rank_ / k, rank_, &topo_.node));
    } else {
      RG_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &topo_.node));
    }
    RG_MPI_CHECK(MPI_Comm_set_errhandler(topo_.node, MPI_ERRORS_RETURN));
    RG_MPI_CHECK(MPI_Comm_rank(topo_.node, &topo_.node_rank));
    RG_MPI_CHECK(MPI_Comm_size(topo_.node, &topo_.node_size));
    RG_MPI_CHECK(MPI_Comm_split(comm_, topo_.node_rank == 0 ? 0 : MPI_UNDEFINED, rank_, &topo_.leaders));
    if (topo_.leaders != MPI_COMM_NULL) {
      RG_MPI_CHECK(MPI_Comm_set_errhandler(topo_.leaders, MPI_ERRORS_RETURN));
      RG_MPI_CHECK(MPI_Comm_rank(topo_.leaders, &topo_.leader_rank));
      RG_MPI_CHECK(MPI_Comm_size(topo_.leaders, &topo_.num_nodes));
    }
  }
  ~HierarchicalGroup() override {
    shutdown();
    // Same rule as GroupBase's communicators (Note [After a timeout]): only a healthy group frees.
    if (stats().failed > 0) return;
    if (topo_.leaders != MPI_COMM_NULL) MPI_Comm_free(&topo_.leaders);
    MPI_Comm_free(&topo_.node);
  }

 protected:
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) override {
    // The accumulation type is f32 for f16 / bf16 (Note [Half-precision accumulation]), else the dtype.
    const size_t acc_bytes = std::max<size_t>(dtype_size(t.dtype()), sizeof(float));
    const int64_t slots = ring_tuning_.slot_elems(acc_bytes);
    return with_accumulator(scratch_, t, slots, [&](auto zero, auto* work, auto* slot_buffer) -> std::unique_ptr<PendingOp> {
      return std::make_unique<HierarchicalAllreduce<decltype(zero)>>(t, op, tag, topo_, size_, work, slot_buffer,
                                                                    ring_tuning_);
    });
  }

 private:
  Topology topo_;
};

}  // namespace

std::unique_ptr<ProcessGroup> new_hierarchical_group(const GroupOptions& options) {
  return std::make_unique<HierarchicalGroup>(options);
}

}  // namespace ringgrad::dist::detail
