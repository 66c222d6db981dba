// One step of a ring, over MPI point-to-point (internal): receive from the left neighbour while
// sending to the right. Shared by the ring's all-gather (ring.cpp) and the low-precision ring
// (low_precision_ring.cpp).
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>

#include "core/error.h"
#include "dist/algorithms/network_model.h"
#include "dist/mpi_check.h"

namespace ringgrad::dist::detail {

inline int checked_int(size_t count, const char* op) {
  RG_CHECK(count <= static_cast<size_t>(INT_MAX), op, "a ring message of ", count,
           " elements exceeds MPI's int count limit (rank ", rank_for_errors(), ")");
  return static_cast<int>(count);
}

// One ring step: receive `rcount` from the left neighbour while sending `scount` to the right.
class RingStep {
 public:
  void post(const void* send, size_t scount, void* recv, size_t rcount, MPI_Datatype type, int left, int right, int tag,
            MPI_Comm comm) {
    RG_MPI_CHECK(MPI_Irecv(recv, checked_int(rcount, "dist.ring"), type, left, tag, comm, &requests_[0]));
    int type_bytes = 0;
    RG_MPI_CHECK(MPI_Type_size(type, &type_bytes));
    pay_for_message(comm, right, scount * static_cast<size_t>(type_bytes));  // Note [A price per message]
    RG_MPI_CHECK(MPI_Isend(send, checked_int(scount, "dist.ring"), type, right, tag, comm, &requests_[1]));
    posted_ = true;
  }
  bool posted() const { return posted_; }
  bool test() {  // true once both halves finished; the step is then over
    int done = 0;
    RG_MPI_CHECK(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE));
    if (done) posted_ = false;
    return done != 0;
  }
  void abandon() {  // See Note [After a timeout] in dist/comm_thread.h
    if (!posted_) return;
    if (requests_[0] != MPI_REQUEST_NULL) {
      MPI_Cancel(&requests_[0]);
      MPI_Request_free(&requests_[0]);
    }
    if (requests_[1] != MPI_REQUEST_NULL) MPI_Request_free(&requests_[1]);
    posted_ = false;
  }

 private:
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool posted_ = false;
};

}  // namespace ringgrad::dist::detail
