// Backend "hierarchical": a reduce within each node to its leader, the ring among the leaders,
// then a broadcast within each node (dist/algorithms/hierarchical.cpp). Broadcast, all-gather and
// reduce-scatter are the MPI library's over the whole group.
//
// What a "node" is: by default the ranks sharing a machine (MPI_COMM_TYPE_SHARED). Setting
// GroupOptions::ranks_per_node or RINGGRAD_RANKS_PER_NODE=k declares ranks [0, k) node 0, [k, 2k)
// node 1, ... -- so one machine can test (and teach) the multi-node path. The last node may be
// smaller.
#include <mpi.h>

#include <memory>
#include <utility>

#include "core/env.h"
#include "core/error.h"
#include "dist/algorithms/algorithms.h"
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"
#include "dist/mpi_check.h"

namespace ringgrad::dist::detail {
namespace {

// 0 means "the real machines".
int ranks_per_node_from(const GroupOptions& options) {
  if (options.ranks_per_node) {
    RG_CHECK(*options.ranks_per_node > 0, "dist.new_group", "ranks_per_node must be positive, got ",
             *options.ranks_per_node);
    return *options.ranks_per_node;
  }
  return static_cast<int>(env::integer("RINGGRAD_RANKS_PER_NODE", "dist.new_group", 1, 1 << 20).value_or(0));
}

class HierarchicalGroup final : public MpiGroupBase {
 public:
  explicit HierarchicalGroup(const GroupOptions& options) : MpiGroupBase("hierarchical", options) {
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
    Collectives table = mpi_library_collectives();
    table.allreduce = [this](const Tensor& t, ReduceOp op, int tag) {
      return hierarchical_allreduce(t, op, tag, topo_, size_, scratch_, ring_tuning_);
    };
    set_collectives(std::move(table));
  }
  ~HierarchicalGroup() override {
    shutdown();
    // Same rule as GroupBase's communicators (Note [After a timeout]): only a healthy group frees.
    if (stats().failed > 0) return;
    if (topo_.leaders != MPI_COMM_NULL) MPI_Comm_free(&topo_.leaders);
    MPI_Comm_free(&topo_.node);
  }

 private:
  Topology topo_;
};

}  // namespace

std::unique_ptr<ProcessGroup> new_hierarchical_group(const GroupOptions& options) {
  return std::make_unique<HierarchicalGroup>(options);
}

}  // namespace ringgrad::dist::detail
