// Backend "mpi": the MPI library's own nonblocking collectives (MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgather, MPI_Ireduce_scatter_block: dist/algorithms/mpi_library.cpp), driven by the
// group's communication thread.
//
// f16 / bf16 have no MPI datatype: they are widened into an f32 scratch buffer, reduced there and
// rounded once (Note [Half-precision accumulation]), at twice the bytes on the wire. AVG is an
// MPI_SUM followed by one division on every rank (Note [Where AVG divides]).
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"

namespace ringgrad::dist::detail {

namespace {

class MpiGroup final : public MpiGroupBase {
 public:
  explicit MpiGroup(const GroupOptions& options) : MpiGroupBase("mpi", options) {
    set_collectives(mpi_library_collectives());
  }
  ~MpiGroup() override { shutdown(); }
};

}  // namespace

std::unique_ptr<ProcessGroup> new_mpi_group(const GroupOptions& options) { return std::make_unique<MpiGroup>(options); }

}  // namespace ringgrad::dist::detail
