// RequestsOp: a PendingOp made of MPI requests, finished by a callback; abandon_request: what a
// PendingOp does with its requests after a timeout (internal).
#pragma once

#include <mpi.h>

#include <functional>
#include <vector>

#include "dist/comm_thread.h"
#include "dist/mpi_check.h"

namespace ringgrad::dist::detail {

// Cancels a posted receive, frees a posted send (See Note [After a timeout] in dist/comm_thread.h).
inline void abandon_request(MPI_Request& r, bool is_receive) {
  if (r == MPI_REQUEST_NULL) return;
  if (is_receive) MPI_Cancel(&r);
  MPI_Request_free(&r);
}

class RequestsOp : public PendingOp {
 public:
  RequestsOp(std::vector<MPI_Request> requests, std::function<void()> on_done, std::vector<Tensor> keep_alive)
      : requests_(std::move(requests)), on_done_(std::move(on_done)), keep_alive_(std::move(keep_alive)) {}

  bool poll() override {
    int done = 0;
    // MPI_Testall advances MPI once and returns; it never blocks (See Note [Polling, not spinning]).
    RG_MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
    if (done && on_done_) on_done_();
    return done != 0;
  }

 private:
  std::vector<MPI_Request> requests_;
  std::function<void()> on_done_;
  std::vector<Tensor> keep_alive_;  // the op's tensors, alive while MPI may write into them
};

}  // namespace ringgrad::dist::detail
