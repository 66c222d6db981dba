// Backend "tree": AllReduce by recursive doubling (dist/algorithms/tree.cpp), or through
// shared-memory slots when every rank is on one machine (Note [Shared-memory AllReduce] in
// dist/shm/slots.h). Broadcast, all-gather, reduce-scatter and barrier are the MPI library's.
#include <memory>
#include <utility>

#include "dist/algorithms/algorithms.h"
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"

namespace ringgrad::dist::detail {

namespace {

class TreeGroup final : public MpiGroupBase {
 public:
  explicit TreeGroup(const GroupOptions& options) : MpiGroupBase("tree", options) {
    use_shared_memory(options);
    Collectives table = mpi_library_collectives();
    table.allreduce = [this](const Tensor& t, ReduceOp op, int tag) { return small_allreduce(t, op, tag); };
    set_collectives(std::move(table));
  }
  ~TreeGroup() override { shutdown(); }
};

}  // namespace

std::unique_ptr<ProcessGroup> new_tree_group(const GroupOptions& options) {
  return std::make_unique<TreeGroup>(options);
}

}  // namespace ringgrad::dist::detail
