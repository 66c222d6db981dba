// MpiGroupBase: what the backends that move tensors over MPI share (internal): "mpi", "ring",
// "tree", "auto" and "hierarchical" -- every backend but nccl. On top of GroupBase
// (dist/group_base.h: the thread, the checks, staging, send / recv, barrier, debug mode) it holds
// the MPI data path: the group's communicator as a Channel, reusable scratch buffers, the ring's
// tuning, the MPI library's own collectives for the tables (MPI_Iallreduce, MPI_Ibcast,
// MPI_Iallgather, MPI_Ireduce_scatter_block), and the shared memory of one machine -- the small-AllReduce slots
// (dist/shm/slots.h) and the reduction buffers summed in place (Note [Shared gradient buffers] in
// dist/shm/reduction_buffer.h).
//
// dist/backends/ holds one file per backend, named as new_group names it (backends.h lists their
// constructors): each is its table of collectives (Note [One table per backend] in
// dist/group_base.h), chosen among the algorithms of dist/algorithms/.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/algorithms/algorithms.h"
#include "dist/group_base.h"
#include "dist/shm/reduction_buffer.h"
#include "dist/shm/slots.h"

namespace ringgrad::dist::detail {

class MpiGroupBase : public GroupBase {
 public:
  MpiGroupBase(std::string backend, const GroupOptions& options);
  ~MpiGroupBase() override;

  bool offers_shared_memory(Device device) const override {
    return shared_slots_ != nullptr && !staging().stages(device);
  }

 protected:
  // Note [Shared gradient buffers] where shared_slots_ is set (every rank on this machine, shared
  // memory allowed).
  Tensor new_in_place_buffer(int64_t numel, DType dtype, Device device) override;
  bool reserve_reduce_scatter_staging(int64_t bytes) override;
  std::shared_ptr<Work> reduce_scatter_staged(const OpInfo& info, const Tensor& output, const Tensor& input,
                                              ReduceOp op) override;

  // What the backends' tables are made of (Note [One table per backend]).
  Channel channel(int tag) const { return Channel{comm_, rank_, size_, tag}; }
  // Tables of the two algorithm families, over this group, for the backends to take or amend: the
  // MPI library's own collectives (dist/algorithms/mpi_library.cpp), and the ring's -- pipelined
  // AllReduce and reduce-scatter, ring all-gather, chain broadcast (dist/algorithms/ring.cpp).
  Collectives mpi_library_collectives();
  Collectives ring_collectives();
  // AllReduce for small tensors: through the shared-memory slots when t fits one (Note
  // [Shared-memory AllReduce] in dist/shm/slots.h), else by recursive doubling.
  std::unique_ptr<PendingOp> small_allreduce(const Tensor& t, ReduceOp op, int tag);
  // Maps shared_slots_ when options (or RINGGRAD_DIST_SHM) allow and every rank is on this machine.
  // Collective: a backend's constructor calls it on every rank.
  void use_shared_memory(const GroupOptions& options);

  MPI_Comm comm_ = MPI_COMM_NULL;  // comms().comm()
  Scratch scratch_;
  RingTuning ring_tuning_;
  std::unique_ptr<SharedSlots> shared_slots_;  // null: small AllReduces go over MPI

 private:
  // Note [Reduce-scatter through a shared buffer]: set by reserve_reduce_scatter_staging, on every
  // rank or none; replaced only by a collective call.
  std::shared_ptr<SharedBuffer> scatter_staging_;
};

}  // namespace ringgrad::dist::detail
