// RingFamilyGroup: every collective by the ring algorithms (dist/algorithms/ring.cpp) -- backend
// "ring" itself, and the base of backends that replace only its AllReduce ("auto") (internal).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "dist/backends/mpi_group.h"

namespace ringgrad::dist::detail {

class RingFamilyGroup : public MpiGroupBase {
 public:
  RingFamilyGroup(std::string backend, const GroupOptions& options) : MpiGroupBase(std::move(backend), options) {}
  ~RingFamilyGroup() override { shutdown(); }

 protected:
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) override;
  std::unique_ptr<PendingOp> start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                  int tag) override;
  std::unique_ptr<PendingOp> start_broadcast(const Tensor& t, int root, int tag) override;
  std::unique_ptr<PendingOp> start_allgather(const Tensor& output, const Tensor& input, int tag) override;
};

}  // namespace ringgrad::dist::detail
