// MpiComms: one group's MPI communicators and the operations every backend runs over them
// (internal), whatever moves its collectives' data.
//
// Each is a duplicate of MPI_COMM_WORLD (so the group's messages never match another group's) that
// returns errors instead of aborting (dist/mpi_check.h):
//   comm()   the group's communicator: barrier, a backend's construction-time agreement (nccl's
//            unique id, the shared-memory vote), and the data path of the MPI backends
//            (dist/backends/mpi_group.h)
//   p2p      send / recv, so that user tags never meet collective tags
//   debug    the fingerprints of Note [Debug mode] (dist/group_base.h)
// GroupBase touches MPI only through this unit.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "dist/comm_thread.h"

namespace ringgrad::dist::detail {

// Polls `requests` (MPI_Testall, every 200 us) until they complete or timeout_seconds have passed;
// returns whether they completed. Requests still pending then stay with MPI (a collective cannot
// be cancelled), as after any timeout: group creation uses it to fail instead of blocking.
bool wait_within(MPI_Request* requests, int count, double timeout_seconds);

class MpiComms {
 public:
  // Collective over MPI_COMM_WORLD: every rank creates its groups in the same order. Throws when
  // some rank has not joined within timeout_seconds; `description` names the group in that error.
  MpiComms(double timeout_seconds, const std::string& description);
  // Keeps the communicators: free() releases them, but only a healthy group may (Note [After a
  // timeout] in dist/comm_thread.h: MPI may still be working on a broken group's requests).
  ~MpiComms() = default;
  MpiComms(const MpiComms&) = delete;
  MpiComms& operator=(const MpiComms&) = delete;
  void free();  // no throw (called from destructors)

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // MPI_Ibarrier over comm().
  std::unique_ptr<PendingOp> start_barrier() const;
  // A host tensor's bytes to / from a peer over the p2p communicator (Staging::host_side). A
  // receive checks that the message filled the tensor exactly.
  std::unique_ptr<PendingOp> start_send(const Tensor& host, int dst, int tag) const;
  std::unique_ptr<PendingOp> start_recv(const Tensor& host, int src, int tag) const;
  // Note [Debug mode]: all-gathers `fingerprint` over the debug communicator, fails the op when the
  // ranks' differ (the message names `where`), else runs start_real's op.
  std::unique_ptr<PendingOp> start_checked(const std::string& fingerprint, const std::string& where,
                                           std::function<std::unique_ptr<PendingOp>()> start_real) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // send / recv: user tags never meet collective tags
  MPI_Comm debug_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace ringgrad::dist::detail
