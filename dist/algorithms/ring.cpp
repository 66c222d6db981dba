// The ring's all-gather and a pipelined chain broadcast, over MPI point-to-point (MPI_Isend /
// MPI_Irecv). The ring AllReduce and ReduceScatter are the pipelined ring, ring_pipeline.cpp;
// backend "ring" runs all four (MpiGroupBase::ring_collectives, dist/backends/mpi_group.cpp).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/network_model.h"
#include "dist/algorithms/ring_step.h"
#include "dist/mpi_check.h"

namespace ringgrad::dist::detail {

namespace {

// input: S, output: (N, *S) bytes. Rank r's block r starts as its input; N-1 ring steps pass the rest.
class RingAllgather : public PendingOp {
 public:
  RingAllgather(const Tensor& output, const Tensor& input, int tag, MPI_Comm comm, int rank, int size)
      : output_(output),
        input_(input),
        tag_(tag),
        comm_(comm),
        rank_(rank),
        N_(size),
        block_(input.nbytes()),
        out_(static_cast<std::byte*>(output.raw_data())) {
    if (block_ > 0) std::memcpy(out_ + rank_ * block_, input.raw_data(), block_);
  }
  bool poll() override {
    const int left = (rank_ - 1 + N_) % N_, right = (rank_ + 1) % N_;
    for (;;) {
      if (step_ == N_ - 1) return true;
      const int send = (rank_ - step_ + N_) % N_, recv = (rank_ - step_ - 1 + 2 * N_) % N_;
      if (!exchange_.posted())
        exchange_.post(out_ + send * block_, block_, out_ + recv * block_, block_, MPI_BYTE, left, right, tag_, comm_);
      if (!exchange_.test()) return false;
      ++step_;
    }
  }
  void abandon() override { exchange_.abandon(); }

 private:
  Tensor output_, input_;
  int tag_;
  MPI_Comm comm_;
  int rank_, N_;
  size_t block_;
  std::byte* out_;
  int step_ = 0;
  RingStep exchange_;
};

// A chain root -> root+1 -> ... -> root-1, cut into pieces so that rank p forwards piece k while
// piece k+1 is still arriving: time ~ bytes/bandwidth + N * piece latency, not N * bytes/bandwidth.
class ChainBroadcast : public PendingOp {
 public:
  static constexpr size_t kPiece = size_t{1} << 20;

  ChainBroadcast(const Tensor& t, int root, int tag, MPI_Comm comm, int rank, int size)
      : tensor_(t), tag_(tag), comm_(comm), bytes_(t.nbytes()), data_(static_cast<std::byte*>(t.raw_data())) {
    const int position = (rank - root + size) % size;
    prev_ = (rank - 1 + size) % size;
    next_ = (rank + 1) % size;
    is_root_ = position == 0;
    has_next_ = position != size - 1;
    pieces_ = (bytes_ + kPiece - 1) / kPiece;
    if (is_root_ && has_next_)
      for (size_t k = 0; k < pieces_; ++k) forward(k);
    if (is_root_) received_ = pieces_;
  }

  bool poll() override {
    while (received_ < pieces_) {
      if (recv_ == MPI_REQUEST_NULL) {
        RG_MPI_CHECK(
            MPI_Irecv(data_ + received_ * kPiece, piece_bytes(received_), MPI_BYTE, prev_, tag_, comm_, &recv_));
      }
      int done = 0;
      RG_MPI_CHECK(MPI_Test(&recv_, &done, MPI_STATUS_IGNORE));  // sets recv_ to NULL when done
      if (!done) return false;
      if (has_next_) forward(received_);
      ++received_;
    }
    int done = 0;
    RG_MPI_CHECK(MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }

  void abandon() override {
    if (recv_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&recv_);
      MPI_Request_free(&recv_);
    }
    for (auto& r : sends_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  }

 private:
  int piece_bytes(size_t k) const { return static_cast<int>(std::min(kPiece, bytes_ - k * kPiece)); }
  void forward(size_t k) {
    sends_.push_back(MPI_REQUEST_NULL);
    pay_for_message(comm_, next_, static_cast<size_t>(piece_bytes(k)));  // Note [A price per message]
    RG_MPI_CHECK(MPI_Isend(data_ + k * kPiece, piece_bytes(k), MPI_BYTE, next_, tag_, comm_, &sends_.back()));
  }

  Tensor tensor_;
  int tag_;
  MPI_Comm comm_;
  size_t bytes_;
  std::byte* data_;
  int prev_ = 0, next_ = 0;
  bool is_root_ = false, has_next_ = false;
  size_t pieces_ = 0, received_ = 0;
  MPI_Request recv_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
};

}  // namespace

std::unique_ptr<PendingOp> ring_allgather(const Tensor& output, const Tensor& input, Channel ch) {
  return std::make_unique<RingAllgather>(output, input, ch.tag, ch.comm, ch.rank, ch.size);
}

std::unique_ptr<PendingOp> chain_broadcast(const Tensor& t, int root, Channel ch) {
  return std::make_unique<ChainBroadcast>(t, root, ch.tag, ch.comm, ch.rank, ch.size);
}

}  // namespace ringgrad::dist::detail
