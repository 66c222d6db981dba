// MpiGroupBase: what the backends that move tensors over MPI share (internal): "mpi", "ring",
// "tree", "auto" and "hierarchical" -- every backend but nccl. On top of GroupBase
// (dist/group_base.h: the thread, the checks, staging, send / recv, barrier, debug mode) it holds
// the MPI data path: the group's communicator as a Channel, reusable scratch buffers, the ring's
// tuning, MPI's own collectives as the default start_* (MPI_Ibcast, MPI_Iallgather,
// MPI_Ireduce_scatter_block), and the shared memory of one machine -- the small-AllReduce slots
// (dist/shm/slots.h) and the reduction buffers summed in place (Note [Shared gradient buffers] in
// dist/shm/reduction_buffer.h).
//
// dist/backends/ holds one file per backend, named as new_group names it (backends.h lists their
// constructors); the algorithms they choose among are PendingOps in dist/algorithms/.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
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

  bool reduces_in_place(const Tensor& t) const override { return shared_buffer_of(t) != nullptr; }

 protected:
  // Defaults: MPI_Ibcast / MPI_Iallgather (bytes) / MPI_Ireduce_scatter_block (in the accumulation
  // type). Backends with their own algorithms override them.
  std::unique_ptr<PendingOp> start_broadcast(const Tensor& t, int root, int tag) override;
  std::unique_ptr<PendingOp> start_allgather(const Tensor& output, const Tensor& input, int tag) override;
  std::unique_ptr<PendingOp> start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                  int tag) override;

  // Note [Shared gradient buffers] where shared_slots_ is set (every rank on this machine, shared
  // memory allowed).
  Tensor new_in_place_buffer(int64_t numel, DType dtype, Device device) override;
  std::shared_ptr<Work> allreduce_in_place(const OpInfo& info, const Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> allgather_in_place(const OpInfo& info, const Tensor& output, const Tensor& input) override;
  bool reserve_reduce_scatter_staging(int64_t bytes) override;
  std::shared_ptr<Work> reduce_scatter_staged(const OpInfo& info, const Tensor& output, const Tensor& input,
                                              ReduceOp op) override;

  Channel channel(int tag) const { return Channel{comm_, rank_, size_, tag}; }
  // Maps shared_slots_ when options (or RINGGRAD_DIST_SHM) allow and every rank is on this machine.
  // Collective: a backend's constructor calls it on every rank.
  void use_shared_memory(const GroupOptions& options);

  MPI_Comm comm_ = MPI_COMM_NULL;  // comms().comm()
  Scratch scratch_;
  RingTuning ring_tuning_;
  std::unique_ptr<SharedSlots> shared_slots_;  // null: small AllReduces go over MPI

 private:
  // The live shared buffer t lies in, or null (the ordinary path).
  std::shared_ptr<SharedBuffer> shared_buffer_of(const Tensor& t) const;

  // Buffers from new_reduction_buffer that live in shared memory; each dies with its last tensor.
  mutable std::mutex shared_buffers_mutex_;
  std::vector<std::weak_ptr<SharedBuffer>> shared_buffers_;
  std::atomic<bool> any_shared_buffers_{false};  // lets every other AllReduce skip the lock
  // Note [Reduce-scatter through a shared buffer]: set by reserve_reduce_scatter_staging, on every
  // rank or none; replaced only by a collective call.
  std::shared_ptr<SharedBuffer> scatter_staging_;
};

}  // namespace ringgrad::dist::detail
