// The pipelined ring: AllReduce and ReduceScatter by the ring reduce-scatter (and, for AllReduce,
// its all-gather), chunked and pipelined -- RingPipeline, and the entry points that lend it buffers:
// ring_allreduce, ring_reduce_scatter, and ring_allreduce_sums for hierarchical's leaders.
//
// The ring is bandwidth-optimal: each rank sends 2(N-1)/N of the data for an AllReduce whatever N.
// Its cost is 2(N-1) message latencies, which is why small tensors want the tree (tree.cpp) and why
// backend "auto" switches between the two (dist/backends/auto.cpp).
//
// N ranks stand in a ring; rank r sends to r+1 and receives from r-1 (mod N). The n elements are
// cut into N chunks (chunk_begin / chunk_size in dist/algorithms/reduce_kernels.h: any n works, 0
// and 1 included; chunks may be empty).
//
//   reduce-scatter, step g = 0 .. N-2: send chunk (r - g - shift), receive chunk (r - g - 1 - shift)
//     and reduce it into the partial sums. After N-1 steps rank r owns chunk (r + 1 - shift), fully
//     reduced. AllReduce uses shift 0; ReduceScatter uses shift 1 so that rank r owns chunk r.
//   all-gather (AllReduce only), step g = 0 .. N-2: send chunk (r + 1 - g), receive chunk (r - g)
//     into place.
//
// Each rank sends N-1 chunks per phase: 2(N-1)/N of the data for an AllReduce, whatever N -- in
// bytes when T is its own accumulation type. For f16 / bf16 the partial sums of steps 1 .. N-2
// travel as f32 (Note [Each chunk is reduced once]): 1 + 2(N-2) + (N-1) = 3N-4 chunks' worth of
// T, (3N-4)/N of the tensor's bytes (N >= 2), 1.43x the 2(N-1)/N at N = 8.
//
// Note [Ring pipelining]: a chunk travels as segments (RingTuning::segment_bytes), and the chunk a
// rank sends at step g is the one it received at step g-1. So segment j can be forwarded as soon as
// segment j of the previous step arrived and was reduced; it need not wait for the whole chunk.
// While segment j is being added, segment j+1 is on the wire: the reduction hides behind the
// transfer, and step g+1 starts before step g ends. Receives in flight are bounded by
// RingTuning::window, each into its own slot of the receive buffer.
//
// Sends and receives are two ordered lists of (step, segment) units. MPI delivers messages between
// two ranks with one tag in order, so the k-th send of rank r matches the k-th receive of rank r+1:
// both are segment j of the same chunk at the same step (send chunk of r at step g == receive
// chunk of r+1 at step g).
//
// Between the phases the owner of each chunk divides it for AVG (by `divisor`) and rounds it to T,
// segment by segment as its last partial sum arrives (Note [Where AVG divides], Note
// [Half-precision accumulation] in dist/process_group.h).
//
// Note [Each chunk is reduced once]: during the reduce-scatter a rank receives each chunk but
// its first-sent one exactly once, and adds its own contribution to it right then:
// work[c] = input[c] (op) received[c]. So the rank's input is read in place, in its storage type
// T, and never copied or widened up front; `work` (the partial sums, Acc) is written chunk by
// chunk as they arrive. And what a rank sends at step 0 is its own input, not yet a sum of
// anything: it travels as T. Only the partial sums of steps 1 .. N-2 need Acc. With 2 ranks an
// f16 / bf16 AllReduce therefore moves only f16 / bf16 (half the bytes of summing in f32 on the
// wire), while every sum is still formed in f32 and rounded once.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/network_model.h"
#include "dist/mpi_check.h"

namespace ringgrad::dist::detail {

namespace {

template <class T>
class RingPipeline : public PendingOp {
  using Acc = compute_t<T>;

 public:
  enum class Mode { allreduce, reduce_scatter };

  // input: this rank's (n) contribution, read only (allreduce: the tensor itself, which the
  // all-gather later overwrites). work: (n) Acc partial sums, written as chunks arrive (Note [Each
  // chunk is reduced once]); it may alias input when T == Acc. allreduce: the result lands in
  // data (n). reduce_scatter: `data` is the (n / N) output block. slots: window * segment Acc.
  // keep_alive: tensors MPI reads or writes, held until the op ends.
  RingPipeline(Mode mode, int64_t n, ReduceOp op, int divisor, Channel ch, const T* input, T* data, Acc* work,
               Acc* slots, RingTuning tuning, std::vector<Tensor> keep_alive)
      : mode_(mode),
        n_(n),
        op_(op),
        divisor_(divisor),
        ch_(ch),
        input_(input),
        data_(data),
        work_(work),
        slots_(slots),
        segment_(tuning.segment_elems(sizeof(Acc))),
        window_(std::max(1, tuning.window)),
        keep_alive_(std::move(keep_alive)) {
    const int N = ch.size, r = ch.rank, shift = mode == Mode::allreduce ? 0 : 1;
    owned_ = mod(r + 1 - shift);
    const int steps = mode == Mode::allreduce ? 2 * (N - 1) : N - 1;
    for (int g = 0; g < steps; ++g) {
      const bool rs = g < N - 1;
      const int send = rs ? mod(r - g - shift) : mod(r + 1 - (g - (N - 1)));
      const int recv = rs ? mod(r - g - 1 - shift) : mod(r - (g - (N - 1)));
      add_units(sends_, send, rs, g);
      add_units(recvs_, recv, rs, g);
    }
    // A send at step g forwards the chunk received at step g-1: it waits for that receive.
    for (size_t i = 0, k = 0; i < sends_.size(); ++i) {
      if (sends_[i].step == 0) continue;
      while (recvs_[k].step != sends_[i].step - 1 || recvs_[k].begin != sends_[i].begin) ++k;
      sends_[i].after_recv = static_cast<int64_t>(k);
    }
    first_ag_send_ =
        std::find_if(sends_.begin(), sends_.end(), [](const Unit& u) { return !u.reduce_scatter; }) - sends_.begin();
    send_requests_.assign(sends_.size(), MPI_REQUEST_NULL);
    recv_requests_.assign(static_cast<size_t>(window_), MPI_REQUEST_NULL);
    if (N == 1) {  // nothing to exchange: the owned chunk is everything, this rank's input
      combine_into(work_, input_, static_cast<const T*>(nullptr), n_, op_);
      finish_owned(0, n_);
    }
  }

  bool poll() override {
    for (bool progress = true; progress;) {
      progress = false;
      while (next_send_ < sends_.size() && ready_to_send(sends_[next_send_])) {
        post_send(next_send_++);
        progress = true;
      }
      while (next_post_ < recvs_.size() && next_post_ - received_ < static_cast<size_t>(window_) &&
             may_receive(recvs_[next_post_])) {
        post_recv(next_post_++);
        progress = true;
      }
      if (received_ < next_post_) {
        int done = 0;
        RG_MPI_CHECK(MPI_Test(&recv_requests_[received_ % window_], &done, MPI_STATUS_IGNORE));
        if (done) {
          on_received(received_++);
          progress = true;
        }
      }
    }
    if (received_ < recvs_.size() || next_send_ < sends_.size()) return false;
    int done = 0;
    RG_MPI_CHECK(
        MPI_Testall(static_cast<int>(send_requests_.size()), send_requests_.data(), &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }

  void abandon() override {
    for (auto& r : recv_requests_) abandon_request(r, true);
    for (auto& r : send_requests_) abandon_request(r, false);
  }

 private:
  struct Unit {
    int step;
    bool reduce_scatter;      // false: all-gather
    int64_t begin, count;     // elements of the tensor
    int64_t after_recv = -1;  // sends: the receive this send forwards
  };

  int mod(int c) const { return ((c % ch_.size) + ch_.size) % ch_.size; }

  void add_units(std::vector<Unit>& units, int chunk, bool rs, int step) const {
    const int64_t begin = chunk_begin(n_, ch_.size, chunk), count = chunk_size(n_, ch_.size, chunk);
    for (int64_t s = 0; s < count; s += segment_) units.push_back({step, rs, begin + s, std::min(segment_, count - s)});
  }

  bool ready_to_send(const Unit& u) const { return u.after_recv < static_cast<int64_t>(received_); }

  // An all-gather receive writes into the tensor. That region may still be a reduce-scatter send
  // buffer MPI reads from (the input at step 0; the partial sums when they live in the tensor
  // itself, T == Acc): wait for those.
  bool may_receive(const Unit& u) {
    if (u.reduce_scatter || rs_sends_done_) return true;
    // A send not posted yet is MPI_REQUEST_NULL, which MPI_Testall counts as complete.
    if (next_send_ < first_ag_send_) return false;
    int done = 0;
    RG_MPI_CHECK(MPI_Testall(static_cast<int>(first_ag_send_), send_requests_.data(), &done, MPI_STATUSES_IGNORE));
    rs_sends_done_ = done != 0;
    return rs_sends_done_;
  }

  void post_send(size_t i) {
    const Unit& u = sends_[i];
    const int right = mod(ch_.rank + 1);
    const bool partial_sums = u.reduce_scatter && u.step != 0;  // travel as Acc, the rest as T
    pay_for_message(ch_.comm, right, u.count * (partial_sums ? sizeof(Acc) : sizeof(T)));  // Note [A price per message]
    if (u.reduce_scatter && u.step == 0)  // this rank's own input, as T (Note [Each chunk is reduced once])
      RG_MPI_CHECK(MPI_Isend(input_ + u.begin, static_cast<int>(u.count * sizeof(T)), MPI_BYTE, right, ch_.tag,
                             ch_.comm, &send_requests_[i]));
    else if (u.reduce_scatter)
      RG_MPI_CHECK(MPI_Isend(work_ + u.begin, static_cast<int>(u.count), mpi_type<Acc>(), right, ch_.tag, ch_.comm,
                             &send_requests_[i]));
    else
      RG_MPI_CHECK(MPI_Isend(data_ + u.begin, static_cast<int>(u.count * sizeof(T)), MPI_BYTE, right, ch_.tag, ch_.comm,
                             &send_requests_[i]));
  }

  void post_recv(size_t k) {
    const Unit& u = recvs_[k];
    const int left = mod(ch_.rank - 1);
    MPI_Request* request = &recv_requests_[k % window_];
    if (u.reduce_scatter && u.step == 0)  // the left neighbour's input, as T
      RG_MPI_CHECK(
          MPI_Irecv(slot(k), static_cast<int>(u.count * sizeof(T)), MPI_BYTE, left, ch_.tag, ch_.comm, request));
    else if (u.reduce_scatter)
      RG_MPI_CHECK(MPI_Irecv(slot(k), static_cast<int>(u.count), mpi_type<Acc>(), left, ch_.tag, ch_.comm, request));
    else
      RG_MPI_CHECK(MPI_Irecv(data_ + u.begin, static_cast<int>(u.count * sizeof(T)), MPI_BYTE, left, ch_.tag, ch_.comm,
                             request));
  }

  Acc* slot(size_t k) const { return slots_ + static_cast<int64_t>(k % window_) * segment_; }

  void on_received(size_t k) {
    const Unit& u = recvs_[k];
    if (!u.reduce_scatter) return;  // all-gather data landed in place
    if (u.step == 0) combine_into(work_ + u.begin, input_ + u.begin, reinterpret_cast<const T*>(slot(k)), u.count, op_);
    else combine_into(work_ + u.begin, input_ + u.begin, slot(k), u.count, op_);
    if (u.step == ch_.size - 2) finish_owned(u.begin, u.count);  // the last partial sum arrived
  }

  // Elements [begin, begin + count) of the owned chunk are fully reduced: divide once, round once.
  void finish_owned(int64_t begin, int64_t count) {
    if (mode_ == Mode::reduce_scatter) {
      finish_into(data_ + (begin - chunk_begin(n_, ch_.size, owned_)), work_ + begin, count, op_, divisor_);
    } else if (!std::is_same_v<T, Acc> || op_ == ReduceOp::avg) {
      finish_into(data_ + begin, work_ + begin, count, op_, divisor_);
    }
  }

  const Mode mode_;
  const int64_t n_;
  const ReduceOp op_;
  const int divisor_;
  const Channel ch_;
  const T* const input_;
  T* const data_;
  Acc* const work_;
  Acc* const slots_;
  const int64_t segment_;
  const int window_;
  std::vector<Tensor> keep_alive_;
  int owned_ = 0;

  std::vector<Unit> sends_, recvs_;
  size_t first_ag_send_ = 0;
  std::vector<MPI_Request> send_requests_, recv_requests_;
  size_t next_send_ = 0, next_post_ = 0, received_ = 0;
  bool rs_sends_done_ = false;
};

// The pipeline's receive slots: window segments, in scratch buffer 1.
template <class Acc>
Acc* ring_slots(Scratch& scratch, RingTuning tuning) {
  return reinterpret_cast<Acc*>(scratch.get(1, tuning.slot_elems(sizeof(Acc)) * sizeof(Acc)));
}

// The ring reads each rank's input in place and writes the partial sums chunk by chunk as they
// arrive (Note [Each chunk is reduced once] above), so nothing is
// copied or widened before it starts. in_place: the partial sums may live in `input` itself (an
// AllReduce of a tensor whose storage type is its accumulation type); otherwise they go to scratch
// buffer 0.
template <class Make>
std::unique_ptr<PendingOp> with_ring_buffers(Scratch& scratch, const Tensor& input, bool in_place, RingTuning tuning,
                                             Make make) {
  return dispatch_dtype(input.dtype(), [&](auto zero) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    using Acc = compute_t<T>;
    if constexpr (std::is_same_v<T, uint8_t>) {
      RG_FAIL("dist.reduce", "u8 is not supported");  // rejected at submission already
    } else {
      T* in = static_cast<T*>(input.raw_data());
      Acc* work = in_place && std::is_same_v<T, Acc>
                      ? reinterpret_cast<Acc*>(in)
                      : reinterpret_cast<Acc*>(scratch.get(0, input.numel() * sizeof(Acc)));
      return make(zero, in, work, ring_slots<Acc>(scratch, tuning));
    }
  });
}

}  // namespace

std::unique_ptr<PendingOp> ring_allreduce(const Tensor& t, ReduceOp op, Channel ch, Scratch& scratch,
                                          RingTuning tuning) {
  return with_ring_buffers(scratch, t, /*in_place=*/true, tuning,
                           [&](auto zero, auto* data, auto* work, auto* slots) -> std::unique_ptr<PendingOp> {
                             using T = decltype(zero);
                             return std::make_unique<RingPipeline<T>>(RingPipeline<T>::Mode::allreduce, t.numel(), op,
                                                                      ch.size, ch, data, data, work, slots, tuning,
                                                                      std::vector<Tensor>{t});
                           });
}

std::unique_ptr<PendingOp> ring_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, Channel ch,
                                               Scratch& scratch, RingTuning tuning) {
  // The input must survive: it is only read, and the partial sums go to scratch.
  return with_ring_buffers(scratch, input, /*in_place=*/false, tuning,
                           [&](auto zero, auto* in, auto* work, auto* slots) -> std::unique_ptr<PendingOp> {
                             using T = decltype(zero);
                             return std::make_unique<RingPipeline<T>>(RingPipeline<T>::Mode::reduce_scatter,
                                                                      input.numel(), op, ch.size, ch, in,
                                                                      static_cast<T*>(output.raw_data()), work, slots,
                                                                      tuning, std::vector<Tensor>{output, input});
                           });
}

template <class Acc>
std::unique_ptr<PendingOp> ring_allreduce_sums(Acc* sums, int64_t n, ReduceOp op, Channel ch, Acc* slots,
                                               RingTuning tuning) {
  return std::make_unique<RingPipeline<Acc>>(RingPipeline<Acc>::Mode::allreduce, n, op, 1, ch, sums, sums, sums, slots,
                                             tuning, std::vector<Tensor>{});
}
template std::unique_ptr<PendingOp> ring_allreduce_sums(float*, int64_t, ReduceOp, Channel, float*, RingTuning);
template std::unique_ptr<PendingOp> ring_allreduce_sums(double*, int64_t, ReduceOp, Channel, double*, RingTuning);
template std::unique_ptr<PendingOp> ring_allreduce_sums(int32_t*, int64_t, ReduceOp, Channel, int32_t*, RingTuning);
template std::unique_ptr<PendingOp> ring_allreduce_sums(int64_t*, int64_t, ReduceOp, Channel, int64_t*, RingTuning);

}  // namespace ringgrad::dist::detail
