// Backend "tree": AllReduce by recursive doubling (dist/algorithms/tree.cpp), or through
// shared-memory slots when every rank is on one machine (Note [Shared-memory AllReduce] in
// dist/shm/slots.h). Broadcast, all-gather, reduce-scatter and barrier are MPI's (MpiGroupBase and
// GroupBase defaults).
#include <memory>

#include "dist/algorithms/algorithms.h"
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"

namespace ringgrad::dist::detail {

namespace {

class TreeGroup final : public MpiGroupBase {
 public:
  explicit TreeGroup(const GroupOptions& options) : MpiGroupBase("tree", options) { use_shared_memory(options); }
  ~TreeGroup() override { shutdown(); }

 protected:
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) override {
    return tree_allreduce(t, op, channel(tag), scratch_, shared_slots_.get());
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> new_tree_group(const GroupOptions& options) {
  return std::make_unique<TreeGroup>(options);
}

}  // namespace ringgrad::dist::detail
