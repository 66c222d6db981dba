// The tree: AllReduce by recursive doubling, the latency-optimal algorithm for small messages
// (backends "tree" and "auto", dist/backends/). When every rank is on one machine, those backends
// send tensors that fit a slot through shared memory instead (Note [Shared-memory AllReduce] in
// dist/shm/slots.h). What follows is the path between machines.
//
// With p the largest power of two <= N: in step k = 0 .. log2(p) - 1 rank r exchanges its whole
// partial result with rank r XOR 2^k and adds what it receives. After log2(p) steps every rank
// holds the full reduction: log2(p) message latencies instead of the ring's 2(N-1), at the price of
// sending the whole tensor each step (n log2 p elements instead of 2n(N-1)/N) — so it wins below a
// few tens of KiB and loses above (docs/dist.md has the measurement).
//
// A world that is not a power of two folds in first: rank p + i (i < N - p) sends its tensor to
// rank i, which adds it, and receives the final result back at the end.
//
// Note [Eager pieces]: Open MPI sends a message of up to its eager limit (4 KiB on shared memory,
// header included) at once; a larger one first asks the receiver (a rendezvous round trip). So a
// 4 KiB exchange takes 4.3 us where 4000 bytes take 1.5 us (measured, docs/dist.md). Messages up to
// kPiecewiseMaxBytes therefore travel as pieces of at most kEagerPieceBytes, all posted at once:
// 2.1 us for 4 KiB, 3.1 us for 8 KiB, 5.3 for 16 KiB (one rendezvous: 5.1, 5.3, 6.0). Above that
// one rendezvous message, which the shared-memory transport then copies in one go, is faster.
//
// Every rank ends with identical bits: in each step both partners add the same two operands, and
// floating-point addition is commutative. f16 / bf16 are summed in f32 and rounded once; AVG
// divides once at the end on every rank (Notes in dist/process_group.h).
#include <mpi.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/network_model.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/mpi_check.h"

namespace ringgrad::dist::detail {
namespace {

// One step of the schedule: send our partial sums to `send_to`, and/or receive from `recv_from`
// (into the scratch buffer then reduced into ours, or, for the folded-in ranks' last step,
// straight into ours).
struct TreeStep {
  int send_to = -1;
  int recv_from = -1;
  bool reduce = true;
};

std::vector<TreeStep> tree_schedule(int rank, int size) {
  int p = 1;
  while (p * 2 <= size) p *= 2;
  const int extra = size - p;
  std::vector<TreeStep> steps;
  if (rank >= p) {
    steps.push_back({rank - p, -1, false});  // fold in
    steps.push_back({-1, rank - p, false});  // the final result comes back
    return steps;
  }
  if (rank < extra) steps.push_back({-1, rank + p, true});
  for (int mask = 1; mask < p; mask <<= 1) steps.push_back({rank ^ mask, rank ^ mask, true});
  if (rank < extra) steps.push_back({rank + p, -1, false});
  return steps;
}

constexpr size_t kEagerPieceBytes = 4000;  // Note [Eager pieces]
constexpr size_t kPiecewiseMaxBytes = size_t{16} << 10;

// t: (n) viewed flat, reduced in place.
template <class T>
class TreeAllreduce : public PendingOp {
  using Acc = compute_t<T>;

 public:
  TreeAllreduce(const Tensor& t, ReduceOp op, int tag, MPI_Comm comm, int rank, int size, Acc* work, Acc* recv)
      : tensor_(t),
        op_(op),
        tag_(tag),
        comm_(comm),
        size_(size),
        n_(t.numel()),
        data_(static_cast<T*>(t.raw_data())),
        work_(work),
        recv_(recv),
        steps_(tree_schedule(rank, size)) {}

  bool poll() override {
    for (;;) {
      if (posted_) {
        int done = 0;
        RG_MPI_CHECK(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE));
        if (!done) return false;
        posted_ = false;
        const TreeStep& s = steps_[next_ - 1];
        if (s.recv_from >= 0 && s.reduce) reduce_into(work_, recv_, n_, op_);
      }
      if (next_ == steps_.size()) {
        if (!std::is_same_v<T, Acc> || op_ == ReduceOp::avg) finish_into(data_, work_, n_, op_, size_);
        return true;
      }
      const TreeStep& s = steps_[next_++];
      // Note [Eager pieces]: small messages in pieces below the eager limit, others whole.
      const int64_t bytes = n_ * static_cast<int64_t>(sizeof(Acc));
      const int64_t piece = bytes <= static_cast<int64_t>(kPiecewiseMaxBytes)
                                ? std::max<int64_t>(1, static_cast<int64_t>(kEagerPieceBytes / sizeof(Acc)))
                                : std::max<int64_t>(n_, 1);
      requests_.clear();
      // Note [A price per message]: one exchange per step, whatever its eager pieces.
      if (s.send_to >= 0) pay_for_message(comm_, s.send_to, static_cast<size_t>(bytes));
      for (int64_t at = 0; at < n_ || (at == 0 && n_ == 0); at += piece) {
        const int count = static_cast<int>(std::min(piece, n_ - at));  // n checked against INT_MAX at submission
        if (s.recv_from >= 0) {
          requests_.push_back(MPI_REQUEST_NULL);
          RG_MPI_CHECK(MPI_Irecv((s.reduce ? recv_ : work_) + at, count, mpi_type<Acc>(), s.recv_from, tag_, comm_,
                                 &requests_.back()));
        }
        if (s.send_to >= 0) {
          requests_.push_back(MPI_REQUEST_NULL);
          RG_MPI_CHECK(MPI_Isend(work_ + at, count, mpi_type<Acc>(), s.send_to, tag_, comm_, &requests_.back()));
        }
        if (n_ == 0) break;
      }
      posted_ = true;
    }
  }

  void abandon() override {  // See Note [After a timeout] in dist/comm_thread.h
    if (!posted_) return;
    const TreeStep& s = steps_[next_ - 1];
    // Receives and sends alternate in posting order (a step may have only one of the two).
    for (size_t i = 0; i < requests_.size(); ++i) {
      const bool is_receive = s.recv_from >= 0 && (s.send_to < 0 || i % 2 == 0);
      abandon_request(requests_[i], is_receive);
    }
    posted_ = false;
  }

 private:
  Tensor tensor_;  // keeps the storage alive
  ReduceOp op_;
  int tag_;
  MPI_Comm comm_;
  int size_;
  int64_t n_;
  T* data_;
  Acc* work_;  // (n) partial result; data_ itself when T == Acc
  Acc* recv_;  // (n) the partner's partial result
  std::vector<TreeStep> steps_;
  size_t next_ = 0;
  std::vector<MPI_Request> requests_;  // this step's pieces
  bool posted_ = false;
};

}  // namespace

std::unique_ptr<PendingOp> tree_allreduce(const Tensor& t, ReduceOp op, Channel ch, Scratch& scratch) {
  return with_accumulator(scratch, t, std::max<int64_t>(t.numel(), 1),
                          [&](auto zero, auto* work, auto* recv) -> std::unique_ptr<PendingOp> {
                            return std::make_unique<TreeAllreduce<decltype(zero)>>(t, op, ch.tag, ch.comm, ch.rank,
                                                                                   ch.size, work, recv);
                          });
}

}  // namespace ringgrad::dist::detail
