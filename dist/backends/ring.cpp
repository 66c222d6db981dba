// Backend "ring": AllReduce and ReduceScatter by the pipelined ring, a ring all-gather and a
// pipelined chain broadcast (dist/algorithms/ring.cpp), all over MPI point-to-point.
#include "dist/backends/ring.h"

#include "dist/algorithms/algorithms.h"
#include "dist/backends/backends.h"

namespace ringgrad::dist::detail {

std::unique_ptr<PendingOp> RingFamilyGroup::start_allreduce(const Tensor& t, ReduceOp op, int tag) {
  return ring_allreduce(t, op, channel(tag), scratch_, ring_tuning_);
}
std::unique_ptr<PendingOp> RingFamilyGroup::start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                                 int tag) {
  return ring_reduce_scatter(output, input, op, channel(tag), scratch_, ring_tuning_);
}
std::unique_ptr<PendingOp> RingFamilyGroup::start_broadcast(const Tensor& t, int root, int tag) {
  return chain_broadcast(t, root, channel(tag));
}
std::unique_ptr<PendingOp> RingFamilyGroup::start_allgather(const Tensor& output, const Tensor& input, int tag) {
  return ring_allgather(output, input, channel(tag));
}

std::unique_ptr<ProcessGroup> new_ring_group(const GroupOptions& options) {
  return std::make_unique<RingFamilyGroup>("ring", options);
}

}  // namespace ringgrad::dist::detail
