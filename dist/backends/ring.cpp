// Backend "ring": AllReduce and ReduceScatter by the pipelined ring, a ring all-gather and a
// pipelined chain broadcast (dist/algorithms/ring.cpp), all over MPI point-to-point.
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"

namespace ringgrad::dist::detail {

namespace {

class RingGroup final : public MpiGroupBase {
 public:
  explicit RingGroup(const GroupOptions& options) : MpiGroupBase("ring", options) {
    set_collectives(ring_collectives());
  }
  ~RingGroup() override { shutdown(); }
};

}  // namespace

std::unique_ptr<ProcessGroup> new_ring_group(const GroupOptions& options) {
  return std::make_unique<RingGroup>(options);
}

}  // namespace ringgrad::dist::detail
