// Backend "ring": AllReduce as a ring reduce-scatter followed by a ring all-gather, written over
// MPI point-to-point (MPI_Isend / MPI_Irecv), plus a ring all-gather and a pipelined chain broadcast.
//
// N ranks stand in a ring; rank r sends to r+1 and receives from r-1 (mod N). The tensor's n
// elements are cut into N chunks (chunk_begin / chunk_size: the first n % N chunks get one element
// more, so any n works, 0 and 1 included; chunks may be empty).
//
//   reduce-scatter, step s = 0 .. N-2: send chunk (r - s), receive chunk (r - s - 1) and reduce it
//     into the local copy. After N-1 steps rank r holds chunk (r + 1) fully reduced.
//   all-gather, step s = 0 .. N-2: send chunk (r + 1 - s), receive chunk (r - s) into place.
//
// Each rank sends N-1 chunks per phase, 2(N-1) chunks of n/N elements in all: 2(N-1)/N of the
// data, independent of N -- which is why the ring is bandwidth-optimal for large tensors. Its cost
// is 2(N-1) message latencies, which is why small tensors want a tree (not in this slice).
//
// Between the phases the owner of each chunk divides it for AVG and rounds it to the tensor's dtype
// (Note [Where AVG divides], Note [Half-precision accumulation] in dist/process_group.h): the
// reduce-scatter runs on Acc = f32 for f16 / bf16, the all-gather on the tensor's own dtype.
#include <mpi.h>

#include <cstring>
#include <type_traits>

#include "dist/backends.h"
#include "dist/group_base.h"
#include "dist/reduce_kernels.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

namespace {

int checked_int(size_t count, const char* op) {
  RG_CHECK(count <= static_cast<size_t>(INT_MAX), op, "a ring message of ", count,
           " elements exceeds MPI's int count limit (rank ", rank_for_errors(), ")");
  return static_cast<int>(count);
}

// One ring step: receive `rcount` from the left neighbour while sending `scount` to the right.
class RingStep {
 public:
  void post(const void* send, size_t scount, void* recv, size_t rcount, MPI_Datatype type, int left, int right,
            int tag, MPI_Comm comm) {
    RG_MPI_CHECK(MPI_Irecv(recv, checked_int(rcount, "dist.ring"), type, left, tag, comm, &requests_[0]));
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

// t: (n) viewed flat, reduced in place. T: storage type, Acc: accumulation type.
template <class T>
class RingAllreduce : public PendingOp {
  using Acc = compute_t<T>;

 public:
  RingAllreduce(const Tensor& t, ReduceOp op, int tag, MPI_Comm comm, int rank, int size, Acc* work, Acc* recv)
      : tensor_(t), op_(op), tag_(tag), comm_(comm), rank_(rank), N_(size), n_(t.numel()),
        data_(static_cast<T*>(t.raw_data())), work_(work), recv_(recv) {
  }

  bool poll() override {
    const int left = (rank_ - 1 + N_) % N_, right = (rank_ + 1) % N_;
    for (;;) {
      if (phase_ == Phase::reduce_scatter) {
        const int send = (rank_ - step_ + N_) % N_, recv = (rank_ - step_ - 1 + 2 * N_) % N_;
        if (step_ == N_ - 1) {
          finish_owned_chunk();
          phase_ = Phase::all_gather;
          step_ = 0;
          continue;
        }
        if (!exchange_.posted())
          exchange_.post(work_ + chunk_begin(n_, N_, send), chunk_size(n_, N_, send), recv_,
                         chunk_size(n_, N_, recv), mpi_type<Acc>(), left, right, tag_, comm_);
        if (!exchange_.test()) return false;
        reduce_into(work_ + chunk_begin(n_, N_, recv), recv_, chunk_size(n_, N_, recv), op_);
        ++step_;
      } else {
        if (step_ == N_ - 1) return true;
        const int send = (rank_ + 1 - step_ + N_) % N_, recv = (rank_ - step_ + N_) % N_;
        if (!exchange_.posted())
          exchange_.post(data_ + chunk_begin(n_, N_, send), chunk_size(n_, N_, send) * sizeof(T),
                         data_ + chunk_begin(n_, N_, recv), chunk_size(n_, N_, recv) * sizeof(T), MPI_BYTE, left,
                         right, tag_, comm_);
        if (!exchange_.test()) return false;
        ++step_;
      }
    }
  }

  void abandon() override { exchange_.abandon(); }

 private:
  // Rank r now holds chunk r+1 reduced over all ranks: divide once for AVG, round once to T.
  void finish_owned_chunk() {
    const int owned = (rank_ + 1) % N_;
    const int64_t begin = chunk_begin(n_, N_, owned), count = chunk_size(n_, N_, owned);
    if (!std::is_same_v<T, Acc> || op_ == ReduceOp::avg)
      finish_into(data_ + begin, work_ + begin, count, op_, N_);
  }

  enum class Phase { reduce_scatter, all_gather };
  Tensor tensor_;  // keeps the storage alive
  ReduceOp op_;
  int tag_;
  MPI_Comm comm_;
  int rank_, N_;
  int64_t n_;
  T* data_;
  Acc* work_;  // (n) partial sums; data_ itself when T == Acc
  Acc* recv_;  // (n / N + 1) one received chunk
  Phase phase_ = Phase::reduce_scatter;
  int step_ = 0;
  RingStep exchange_;
};

// input: S, output: (N, *S) bytes. Rank r's block r starts as its input; N-1 ring steps pass the rest.
class RingAllgather : public PendingOp {
 public:
  RingAllgather(const Tensor& output, const Tensor& input, int tag, MPI_Comm comm, int rank, int size)
      : output_(output), input_(input), tag_(tag), comm_(comm), rank_(rank), N_(size), block_(input.nbytes()),
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
        RG_MPI_CHECK(MPI_Irecv(data_ + received_ * kPiece, piece_bytes(received_), MPI_BYTE, prev_, tag_, comm_,
                               &recv_));
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

class RingGroup final : public GroupBase {
 public:
  explicit RingGroup(const GroupOptions& options) : GroupBase("ring", options) {}
  ~RingGroup() override { shutdown(); }

 protected:
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) override {
    return with_accumulator(t, t.numel() / size_ + 1, [&](auto zero, auto* work, auto* recv) -> std::unique_ptr<PendingOp> {
      return std::make_unique<RingAllreduce<decltype(zero)>>(t, op, tag, comm_, rank_, size_, work, recv);
    });
  }


  std::unique_ptr<PendingOp> start_broadcast(const Tensor& t, int root, int tag) override {
    return std::make_unique<ChainBroadcast>(t, root, tag, comm_, rank_, size_);
  }

  std::unique_ptr<PendingOp> start_allgather(const Tensor& output, const Tensor& input, int tag) override {
    return std::make_unique<RingAllgather>(output, input, tag, comm_, rank_, size_);
  }

};

}  // namespace

std::unique_ptr<ProcessGroup> new_ring_group(const GroupOptions& options) {
  return std::make_unique<RingGroup>(options);
}

}  // namespace ringgrad::dist::detail
