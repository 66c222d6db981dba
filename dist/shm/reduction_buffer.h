// Reduction buffers that every rank of one machine maps, AllReduced in place (internal; behind
// ProcessGroup::new_reduction_buffer on the "tree" and "auto" backends).
//
// Note [Shared gradient buffers]: DDP's gradients live in a few large buckets that are reduced
// every step. Over messages, each rank of a 2-rank ring must receive 2 x S/2 bytes through the
// kernel (a cross-process copy that pins pages), reduce them into a scratch buffer, and send its
// own: on a machine with one core per rank this CPU time comes straight out of the rank's
// compute (docs/ddp.md, "Where a rank's step goes"). When the buckets themselves are memory that
// every rank maps, nothing has to move first: the ranks split the bucket into chunks, and whoever
// takes a chunk sums it across every rank's copy, in rank order, and writes the result into every
// rank's copy.
//
//   segment:  [nonce | control of rank 0 | ... | rank N-1 | claimed | completed]  [rank 0's buffer] ...
//   op s:     write my header of s (tag, offset, count, dtype, op); publish arrived = s (release)
//             wait until every rank has arrived at s (acquire); check the headers of s agree
//             until op s's chunks are all claimed: claim the next one (compare-and-swap on claimed),
//               sum = buffer_0 + buffer_1 + ... over it (in the accumulation type, rank order);
//               write round(sum) (divided by N for avg) into every rank's buffer; completed += 1 (release)
//             wait until completed counts all of op s's chunks (acquire)
//
// Each element is computed once, by whoever claimed its chunk, and the same bits are written
// everywhere whoever that was; the op copies nothing into or out of the buffer and makes no system
// call. Chunks are 32 KiB of whole cache lines, so two ranks never write the same line.
//
// Why the chunks are claimed rather than assigned (chunk r to rank r): the ranks rarely arrive
// together. In DDP the rank that finished its backward first waits for the other's last bucket, and
// the step waits for that other rank; with fixed shares it then waited for its peer to notice its
// arrival and do its share, and that peer's thread was often asleep between polls (Note [Polling,
// not spinning] in dist/comm_thread.h). Claiming, the last rank to arrive starts at once and does
// whatever is left; an early rank that is still awake takes its part (Note [Spinning for a blocked
// caller] keeps it awake while its caller waits). The counters run over the segment's lifetime:
// every op has the same chunks on every rank (the headers agree), so each rank knows where op s's
// chunks begin, and a claim never moves the count past them.
//
// Why it is safe: a rank arrives at op s only when its own buffer holds its final contribution
// (DDP launches a bucket once every gradient in it is ready), and does not touch its buffer again
// until every chunk of s is complete -- after which no rank reads or writes the buffers for this
// op. Claims of op s + 1 start only once every rank has arrived at s + 1, so after every rank has
// left s. Each rank keeps its headers of the last two ops (by the parity of s): a rank can leave op
// s -- its chunks all done by others -- and write its header of s + 1 before a slower peer has read
// the headers of s; it cannot write s + 2's before that peer arrived at s + 1, after reading them.
// The communication thread polls the counters like any other op, so the group's timeout applies; a
// header that disagrees (another count, dtype, reduce op or view offset on the same buffer) fails
// every rank at once with both views. Ranks that wait on different buffers, or in MPI, end in the
// timeout instead. After a timeout the group is broken (Note [After a timeout] in
// dist/comm_thread.h); a rank that arrives late still reduces whatever chunks are unclaimed, then
// times out waiting for the rest: the buffers' contents are undefined from the timeout on, like
// everything a broken group touched.
//
// A tensor takes this path when it is a view of this rank's buffer, made by the same group: the
// buffer's storage carries it (Note [Buffers that reduce themselves] in dist/staging.h). Every rank must then pass its own buffer's tensor at the same offset:
// a rank that passes an ordinary tensor instead waits in MPI while the others wait here, and both
// end in the timeout. The buffers come from a collective call, so SPMD code gets this right.
//
// Note [Allgather in a shared buffer]: the same op, with a copy where the AllReduce sums. The view
// is N blocks of m elements, and before the op each rank has written its own block (rank q, block
// q) into its own buffer -- ZeRO's updated parameter shards, in the parameters' own storage (Note
// [Parameters in shared memory], dist/zero/zero_optimizer.h). Whoever claims a chunk copies each
// element from its owner's buffer into every other rank's: N - 1 copies per element, shared by the
// ranks, and no staging block, no gathered (N, m) tensor, no message. The same arrival and
// completion counts make it safe: an owner's block is final when it arrives, and nobody writes its
// buffer again before every chunk is complete.
//
// Note [Reduce-scatter through a shared buffer]: ZeRO's stage 2 reduce-scatters each gradient
// bucket, and keeps only this rank's block of the result: the full-size bucket is freed after
// (Note [Gradient buffers released after the reduction], dist/ddp/reducer.h), so it cannot be a
// buffer every rank maps for good. One segment per group serves as staging instead, of a size fixed
// when it is reserved (ProcessGroup::reserve_reduce_scatter_staging): when the op starts, on the
// communication thread, the rank copies its input into its buffer and arrives; then the op is the
// AllReduce's, except that whoever claims a chunk writes the reduced elements only into the copy
// of the rank that owns them, and at the end each rank copies its own block out. The previous op
// on the segment is complete on every rank before the next starts, so one staging buffer serves
// every bucket in turn. An input larger than the staging goes through it in rounds: round k stages
// elements [k w, k w + w) of each of the N blocks, as N blocks of w, and yields w elements of this
// rank's output; each round costs one more arrival of every rank. Against a ring over messages: one
// copy of the input into memory every rank reads, no kernel copy, no message, the reduction shared
// out by claims -- and the memory of the staging alone, not of the whole gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "dist/comm_thread.h"
#include "dist/process_group.h"
#include "dist/staging.h"

namespace ringgrad::dist::detail {

class SharedBuffer final : public InPlaceBuffer, public std::enable_shared_from_this<SharedBuffer> {
 public:
  // Collective over `group` (through its broadcast and allreduce: every rank must call it, in the
  // same order, with the same `bytes`). Null on every rank when any rank could not create or map
  // the segment (the caller then allocates an ordinary buffer).
  static std::shared_ptr<SharedBuffer> create(ProcessGroup& group, size_t bytes);
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  std::byte* mine() const { return region_of(rank_); }  // this rank's buffer, `bytes()` long
  size_t bytes() const { return bytes_; }

  // t: inside mine(), reduced in place over every rank's buffer. `tag` is the collective's tag (the
  // same on every rank). Call only from the thread that runs the group's ops, one op at a time.
  std::unique_ptr<PendingOp> allreduce(const Tensor& t, ReduceOp op, int tag) override;
  // t: N blocks of m elements inside mine(), this rank's block (rank r: block r) written before the
  // call; every rank's t ends up holding every rank's block (Note [Allgather in a shared buffer]).
  std::unique_ptr<PendingOp> allgather(const Tensor& t, int tag) override;
  // input: N m elements of any memory, output: (m) contiguous. mine() is the staging: the input is
  // copied into it and reduced there, in as many rounds as it takes (Note [Reduce-scatter through a
  // shared buffer]). Any size whose rounds fit (rounds_fit).
  std::unique_ptr<PendingOp> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, int tag);
  // Whether a round of at least one element of each of the N blocks fits in the staging.
  bool rounds_fit(size_t element_size) const;

 private:
  struct Control;
  struct Counter;
  // The buffers start control_bytes into the mapping.
  SharedBuffer(const ProcessGroup* group, std::byte* mapping, size_t mapping_bytes, size_t control_bytes, size_t bytes,
               size_t stride, int rank, int size);
  Control& control_of(int rank) const;
  Counter& claimed() const;    // chunks claimed by any rank, over all ops
  Counter& completed() const;  // of which reduced
  std::byte* region_of(int rank) const { return data_ + static_cast<size_t>(rank) * stride_; }

  std::byte* mapping_;  // what mmap returned: the nonce and control lines, then the buffers
  size_t mapping_bytes_;
  std::byte* data_;  // rank 0's buffer
  size_t bytes_;     // bytes per rank's buffer
  size_t stride_;    // bytes_ rounded up to whole pages
  int rank_, size_;
  uint64_t ops_ = 0;            // ops started on this segment: the s of the Note
  uint64_t finished_ = 0;       // of which finished (the last one's s)
  uint64_t chunks_before_ = 0;  // chunks of the finished ops: where the next op's claims start
  friend class InPlaceOp;
};

}  // namespace ringgrad::dist::detail
