// The MPI library's own nonblocking collectives as PendingOps: backend "mpi" is these alone, and
// the other MPI backends take the ones they do not replace (their tables, dist/backends/).
#include <mpi.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/mpi_check.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

std::unique_ptr<PendingOp> mpi_allreduce(const Tensor& t, ReduceOp op, Channel ch, Scratch& scratch) {
  return with_accumulator(scratch, t, 0, [&](auto zero, auto* acc, auto*) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    using Acc = std::remove_pointer_t<decltype(acc)>;
    const int64_t n = t.numel();
    T* data = static_cast<T*>(t.raw_data());
    MPI_Request request;
    RG_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, acc, static_cast<int>(n), mpi_type<Acc>(), mpi_op(op), ch.comm, &request));
    auto on_done = [data, acc, n, op, N = ch.size] {
      if (static_cast<void*>(data) != static_cast<void*>(acc) || op == ReduceOp::avg) finish_into(data, acc, n, op, N);
    };
    return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, on_done, std::vector<Tensor>{t});
  });
}

std::unique_ptr<PendingOp> mpi_broadcast(const Tensor& t, int root, Channel ch) {
  MPI_Request request;
  RG_MPI_CHECK(MPI_Ibcast(t.raw_data(), static_cast<int>(t.nbytes()), MPI_BYTE, root, ch.comm, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{t});
}

std::unique_ptr<PendingOp> mpi_allgather(const Tensor& output, const Tensor& input, Channel ch) {
  MPI_Request request;
  const int bytes = static_cast<int>(input.nbytes());
  RG_MPI_CHECK(
      MPI_Iallgather(input.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, ch.comm, &request));
  return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, nullptr, std::vector<Tensor>{output, input});
}

std::unique_ptr<PendingOp> mpi_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, Channel ch,
                                              Scratch& scratch) {
  const int64_t m = output.numel();
  return with_accumulator(scratch, input, std::max<int64_t>(m, 1),
                          [&](auto zero, auto* work, auto* recv) -> std::unique_ptr<PendingOp> {
                            using T = decltype(zero);
                            using Acc = std::remove_pointer_t<decltype(work)>;
                            MPI_Request request;
                            RG_MPI_CHECK(MPI_Ireduce_scatter_block(work, recv, static_cast<int>(m), mpi_type<Acc>(),
                                                                   mpi_op(op), ch.comm, &request));
                            auto on_done = [out = static_cast<T*>(output.raw_data()), recv, m, op, N = ch.size] {
                              finish_into(out, recv, m, op, N);
                            };
                            return std::make_unique<RequestsOp>(std::vector<MPI_Request>{request}, on_done,
                                                                std::vector<Tensor>{output, input});
                          });
}

}  // namespace ringgrad::dist::detail
