// Backend "mpi": the MPI library's own nonblocking collectives (MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgather, MPI_Ibarrier), driven by the group's communication thread.
//
// f16 / bf16 have no MPI datatype: they are widened into an f32 scratch buffer, reduced there and
// rounded once (Note [Half-precision accumulation]), at twice the bytes on the wire. AVG is an
// MPI_SUM followed by one division on every rank (Note [Where AVG divides]).
#include <mpi.h>

#include <type_traits>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/backends/backends.h"
#include "dist/backends/mpi_group.h"
#include "dist/mpi_check.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

namespace {

class MpiGroup final : public MpiGroupBase {
 public:
  explicit MpiGroup(const GroupOptions& options) : MpiGroupBase("mpi", options) {}
  ~MpiGroup() override { shutdown(); }

 protected:
  // t: any shape, reduced in place.
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int /*tag*/) override {
    return with_accumulator(scratch_, t, 0, [&](auto zero, auto* acc, auto*) -> std::unique_ptr<PendingOp> {
      using T = decltype(zero);
      using Acc = std::remove_pointer_t<decltype(acc)>;
      const int64_t n = t.numel();
      T* data = static_cast<T*>(t.raw_data());
      MPI_Request request;
      RG_MPI_CHECK(
          MPI_Iallreduce(MPI_IN_PLACE, acc, static_cast<int>(n), mpi_type<Acc>(), mpi_op(op), comm_, &request));
      auto on_done = [data, acc, n, op, N = size_] {
        if (static_cast<void*>(data) != static_cast<void*>(acc) || op == ReduceOp::avg)
          finish_into(data, acc, n, op, N);
      };
      return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, on_done, std::vector<Tensor>{t});
    });
  }
};

}  // namespace

std::unique_ptr<ProcessGroup> new_mpi_group(const GroupOptions& options) { return std::make_unique<MpiGroup>(options); }

}  // namespace ringgrad::dist::detail
