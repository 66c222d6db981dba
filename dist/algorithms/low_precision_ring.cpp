// The low-precision ring: ProcessGroup::allreduce_low_precision and reduce_scatter_low_precision
// on the MPI backends.
//
// Note [Low-precision ring]: the ring of ring_pipeline.cpp -- reduce-scatter, then all-gather,
// each N-1 steps over the N chunks of the tensor -- with every message encoded in a wire format
// (dist/compression/wire_format.h: bf16, or FP8 with a scale per block) and every sum formed in
// f32:
//
//   reduce-scatter, step g = 0 .. N-2: encode chunk (r - g) -- this rank's values at g = 0, else
//     the partial sum received at step g-1 plus this rank's values -- and send it right; receive
//     chunk (r - g - 1) from the left, decode it and add it to this rank's values, in f32.
//   the owner of chunk (r + 1), once its sum S is complete: divides it for AVG, encodes it once,
//     and decodes its own encoding as its result, so that every rank ends with the same bits.
//   all-gather, step g = 0 .. N-2: forward the encoded chunk (r + 1 - g) unchanged; decode the
//     received chunk (r - g) as the result.
//
// So a value is rounded to the wire format once per hop of the reduce-scatter and once more for
// the all-gather -- N roundings of partial sums, each relative to that sum -- never accumulated
// in the low type, as an AllReduce that adds bf16 in bf16 (NCCL's) does. Bytes sent per rank:
// 2(N-1)/N of the encoded tensor, as the f32 ring's but 1/2 (bf16) or ~1/4 (FP8) of them.
//
// The reduce-scatter alone (ProcessGroup::reduce_scatter_low_precision, ZeRO stages 2 and 3) is
// the first half with the ring turned back one chunk -- send chunk (r - g - 1), receive (r - g - 2)
// -- so that the chunk rank r completes is chunk r, its block of the input. Its sum is this rank's
// result as it stands, in f32: no final encoding, so N-1 roundings, and (N-1)/N of the encoded
// tensor sent.
//
// Note [Error feedback]: every encoding is done by one rank -- a reduce-scatter hop by the rank
// that sends it, the final one by the chunk's owner -- and that rank knows what it dropped: the
// value it encoded minus what the receivers decode. With LowPrecisionAllreduce::error_feedback the
// rank keeps exactly that, per element (the owner's final encoding counted N times for AVG, since
// it is divided by N). Then the result is, to f32 rounding,
//   result = op over ranks of (t_r + e_r) - op over ranks of e'_r
// (e_r: the error_feedback tensor going in, added to t_r before anything is encoded; e'_r: coming
// out). Fed back into the next step, nothing is lost for good: over k steps the sum of the results
// plus op over ranks of the last e' equals the sum of the exact reductions of the t's (1-bit SGD,
// Seide et al. 2014; EF-SGD, Karimireddy et al. 2019).
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "dist/algorithms/algorithms.h"
#include "dist/algorithms/ring_step.h"
#include "dist/compression/wire_format.h"

namespace ringgrad::dist::detail {

namespace {

// What the ring leaves where: every chunk's result on every rank, or chunk r's on rank r alone.
enum class RingResult { everywhere, scattered };

template <class T>
class LowPrecisionRing : public PendingOp {
 public:
  // input: (n) T. everywhere: reduced in place (output is input). scattered: n = N * m, output
  // (m) T, input unchanged. work: (n) f32 -- the input itself when T is float and the result
  // lands everywhere, else scratch. wire: two buffers of slot_bytes, the encoded chunk being sent
  // and the one being received.
  LowPrecisionRing(RingResult result, const Tensor& output, const Tensor& input, ReduceOp op,
                   const LowPrecisionAllreduce& how, Channel ch, float* work, std::byte* wire, size_t slot_bytes)
      : input_(input),
        output_(output),
        feedback_(how.error_feedback),
        format_(how.wire),
        block_(how.scale_block),
        average_(op == ReduceOp::avg),
        scattered_(result == RingResult::scattered),
        ch_(ch),
        n_(input.numel()),
        out_(static_cast<T*>(output.raw_data())),
        work_(work),
        dropped_(feedback_.defined() ? static_cast<float*>(feedback_.raw_data()) : nullptr),
        slots_{wire, wire + slot_bytes} {
    const T* in = static_cast<const T*>(input.raw_data());
    if constexpr (!std::is_same_v<T, float>) widen(work_, in, n_);
    else if (work_ != in && n_ > 0) std::memcpy(work_, in, static_cast<size_t>(n_) * sizeof(float));
    if (dropped_ != nullptr)  // Note [Error feedback]: what was dropped before goes in now
      for (int64_t i = 0; i < n_; ++i) work_[i] += dropped_[i];
    if (ch_.size == 1) {  // nothing travels, nothing is dropped
      if (scattered_) finish_scattered(0);
      else store(0, n_);
      if (dropped_ != nullptr) std::fill(dropped_, dropped_ + n_, 0.0f);
    }
  }

  bool poll() override {
    const int N = ch_.size, steps = scattered_ ? N - 1 : 2 * (N - 1);
    const int turn = scattered_ ? 1 : 0;  // rank r completes chunk r, not r + 1
    while (step_ < steps) {
      const bool reduce_scatter = step_ < N - 1;
      const int g = reduce_scatter ? step_ : step_ - (N - 1);
      const int send = reduce_scatter ? mod(ch_.rank - g - turn) : mod(ch_.rank + 1 - g);
      const int recv = reduce_scatter ? mod(ch_.rank - g - 1 - turn) : mod(ch_.rank - g);
      if (!exchange_.posted()) {
        if (reduce_scatter) encode_partial_sum(send);
        exchange_.post(slots_[sending_], encoded_bytes(send), slots_[1 - sending_], encoded_bytes(recv), MPI_BYTE,
                       mod(ch_.rank - 1), mod(ch_.rank + 1), ch_.tag, ch_.comm);
      }
      if (!exchange_.test()) return false;
      if (reduce_scatter) {
        decode_from_wire(format_, slots_[1 - sending_], size(recv), block_, work_ + begin(recv), DecodeInto::add);
        if (g == N - 2) scattered_ ? finish_scattered(recv) : finish_owned(recv);
      } else {
        decode_result(recv, slots_[1 - sending_]);
        sending_ = 1 - sending_;  // the chunk just received is the next one sent, as it came
      }
      ++step_;
    }
    return true;
  }

  void abandon() override { exchange_.abandon(); }

 private:
  int mod(int i) const { return ((i % ch_.size) + ch_.size) % ch_.size; }
  int64_t begin(int c) const { return chunk_begin(n_, ch_.size, c); }
  int64_t size(int c) const { return chunk_size(n_, ch_.size, c); }
  size_t encoded_bytes(int c) const { return wire_bytes(format_, size(c), block_).total(); }

  // Chunk c's partial sum goes out: encoded into the send slot, and what the encoding dropped kept.
  void encode_partial_sum(int c) {
    const float* values = work_ + begin(c);
    encode_to_wire(format_, values, size(c), block_, slots_[sending_]);
    if (dropped_ == nullptr) return;
    float* dropped = dropped_ + begin(c);
    std::memcpy(dropped, values, static_cast<size_t>(size(c)) * sizeof(float));
    decode_from_wire(format_, slots_[sending_], size(c), block_, dropped, DecodeInto::subtract);
    keep_finite(dropped, size(c));
  }

  // The owned chunk's sum S is complete: divided for AVG, encoded once into the send slot (the
  // all-gather's first message), and this rank's result decoded from that encoding.
  void finish_owned(int c) {
    float* sum = work_ + begin(c);
    const int64_t m = size(c);
    if (dropped_ != nullptr) std::memcpy(dropped_ + begin(c), sum, static_cast<size_t>(m) * sizeof(float));
    if (average_) {
      const float divisor = static_cast<float>(ch_.size);
      for (int64_t i = 0; i < m; ++i) sum[i] /= divisor;
    }
    encode_to_wire(format_, sum, m, block_, slots_[sending_]);
    if (dropped_ != nullptr)  // S minus N times (AVG) the decoded average: Note [Error feedback]
      decode_from_wire(format_, slots_[sending_], m, block_, dropped_ + begin(c), DecodeInto::subtract,
                       average_ ? static_cast<float>(ch_.size) : 1.0f);
    if (dropped_ != nullptr) keep_finite(dropped_ + begin(c), m);
    decode_result(c, slots_[sending_]);
  }

  // Reduce-scatter: chunk c (this rank's) is complete, and is the result as it stands -- divided
  // for AVG, rounded once to T. This rank encoded none of it, so it dropped nothing there.
  void finish_scattered(int c) {
    const float* sum = work_ + begin(c);
    const float divisor = average_ ? static_cast<float>(ch_.size) : 1.0f;
    for (int64_t i = 0; i < size(c); ++i) out_[i] = store_as<T>(average_ ? sum[i] / divisor : sum[i]);
    if (dropped_ != nullptr) std::fill(dropped_ + begin(c), dropped_ + begin(c) + size(c), 0.0f);
  }

  void decode_result(int c, const std::byte* wire) {
    decode_from_wire(format_, wire, size(c), block_, work_ + begin(c), DecodeInto::assign);
    store(begin(c), size(c));
  }

  // The AllReduce's result, chunks [begin, begin + count) of work, into the tensor (work is the
  // tensor itself when T is float).
  void store(int64_t begin, int64_t count) {
    if constexpr (!std::is_same_v<T, float>)
      for (int64_t i = begin; i < begin + count; ++i) out_[i] = store_as<T>(work_[i]);
  }

  Tensor input_, output_, feedback_;  // held until the op ends
  WireFormat format_;
  int64_t block_;
  bool average_, scattered_;
  Channel ch_;
  int64_t n_;
  T* out_;  // the AllReduce's tensor (the input), or the reduce-scatter's (m) output
  float* work_;
  float* dropped_;
  std::byte* slots_[2];
  int sending_ = 0;  // which slot holds the chunk to send
  int step_ = 0;
  RingStep exchange_;
};

}  // namespace

namespace {

std::unique_ptr<PendingOp> start_low_precision_ring(RingResult result, const Tensor& output, const Tensor& input,
                                                    ReduceOp op, const LowPrecisionAllreduce& how, Channel ch,
                                                    Scratch& scratch) {
  const int64_t n = input.numel();
  const size_t slot = std::max<size_t>(wire_bytes(how.wire, chunk_size(n, ch.size, 0), how.scale_block).total(), 1);
  std::byte* wire = scratch.get(1, 2 * slot);
  auto make = [&](auto zero) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    // An AllReduce of f32 sums in the tensor itself; a reduce-scatter leaves its input as it was.
    const bool in_place = std::is_same_v<T, float> && result == RingResult::everywhere;
    float* work = in_place ? static_cast<float*>(input.raw_data())
                           : reinterpret_cast<float*>(scratch.get(0, static_cast<size_t>(n) * 4));
    return std::make_unique<LowPrecisionRing<T>>(result, output, input, op, how, ch, work, wire, slot);
  };
  switch (input.dtype()) {
    case DType::f32: return make(float{});
    case DType::f16: return make(Half{});
    case DType::bf16: return make(BFloat16{});
    default: RG_FAIL("dist.low_precision_ring", "needs f32, f16 or bf16, got ", dtype_name(input.dtype()));
  }
}

}  // namespace

std::unique_ptr<PendingOp> low_precision_ring_allreduce(const Tensor& t, ReduceOp op, const LowPrecisionAllreduce& how,
                                                        Channel ch, Scratch& scratch) {
  return start_low_precision_ring(RingResult::everywhere, t, t, op, how, ch, scratch);
}

std::unique_ptr<PendingOp> low_precision_ring_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                             const LowPrecisionAllreduce& how, Channel ch,
                                                             Scratch& scratch) {
  return start_low_precision_ring(RingResult::scattered, output, input, op, how, ch, scratch);
}

}  // namespace ringgrad::dist::detail

namespace ringgrad::dist {

WireBytes low_precision_ring_sends(WireFormat format, int64_t n, int world_size, int rank, int64_t scale_block,
                                   bool reduce_scatter_only) {
  auto chunk = [&](int c) {
    c = ((c % world_size) + world_size) % world_size;
    return wire_bytes(format, detail::chunk_size(n, world_size, c), scale_block);
  };
  WireBytes sent;
  for (int g = 0; g < world_size - 1; ++g) {
    if (reduce_scatter_only) {
      sent += chunk(rank - g - 1);  // the partial sums, the ring turned back one chunk
      continue;
    }
    sent += chunk(rank - g);      // reduce-scatter: the partial sums
    sent += chunk(rank + 1 - g);  // all-gather: the encoded results
  }
  return sent;
}

}  // namespace ringgrad::dist
