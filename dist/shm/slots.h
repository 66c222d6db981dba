// Small AllReduces through memory every rank of one machine maps (internal; used by "tree" and
// "auto").
//
// Note [Shared-memory AllReduce]: on one machine a message between two ranks is a copy into a
// shared FIFO and a copy out, plus MPI's matching, so a small recursive-doubling exchange over
// MPI_Isend / MPI_Irecv is slower than MPI_Allreduce itself before any of ringgrad's own costs
// (tuning history: docs/performance.md, "Small AllReduces through shared memory"). When every rank
// of a group is on one machine, the group maps one segment of shared memory instead, with a slot
// per rank:
//
//   rank r:  [parity 0: posted, header, data] [parity 1: posted, header, data]
//
// Op s (counted per group, the same on every rank) is: copy the tensor, widened to the
// accumulation type, into my slot of parity s % 2 with a header (the op's tag, byte count, dtype
// and reduce op); publish s (a release store to that parity's `posted`, which shares a cache line
// with the header and the first data: Note [One line to wait for] in dist/shm/slots.cpp); wait
// until every rank has published s (acquire loads, polled by the communication thread like any
// other op, so the group's timeout applies); check the headers
// agree; then reduce all slots in rank order 0, 1, ..., N-1, so every rank computes the same sum in
// the same order and ends with identical bits.
//
// Why two parities are enough: rank r writes parity s % 2 again only at op s + 2, which it starts
// after finishing op s + 1, which needed every rank to publish s + 1, which each did only after it
// had finished reading op s. So no slot is overwritten while someone still reads it, without any
// "done reading" flag.
//
// A header that disagrees means the ranks are not issuing the same collectives (Note [Collective
// order] in dist/process_group.h): every rank fails at once with both views instead of waiting for
// the timeout. Two cases still end in the timeout: a rank that never arrives, and sizes of which
// one fits a slot and the other does not (one rank waits here, the other in MPI). After a timeout
// the group is broken and writes nothing more; a rank that arrives late still finds its peers'
// slots intact and completes that op, then times out on the next.
//
// The segment is POSIX shared memory that rank 0 creates and unlinks as soon as every rank has
// mapped it: nothing is left behind in /dev/shm once the group exists, and tearing a group down is
// a local munmap, not a collective that a dead rank could hang. Rank 0 writes a random nonce into
// it; a rank that maps something else under that name (another /dev/shm, as in containers that MPI
// counts as one node) votes no, and the whole group uses MPI point-to-point instead.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "dist/algorithms/algorithms.h"
#include "dist/comm_thread.h"
#include "dist/process_group.h"

namespace ringgrad::dist::detail {

// Accumulation-type bytes one op may carry through a slot: the largest "small" AllReduce.
inline constexpr size_t kSharedSlotBytes = size_t{64} << 10;

class SharedSlots {
 public:
  // Collective over comm: every rank must call it. Null on every rank when the ranks are not all
  // on one machine, or when any rank could not create or map the segment (the tree then uses
  // MPI point-to-point).
  static std::unique_ptr<SharedSlots> create(MPI_Comm comm, int rank, int size);
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  // Whether t, in its accumulation type (f32 for f16 / bf16), fits a slot; an empty t does not.
  static bool fits(const Tensor& t);

  // t: any shape, reduced in place. `tag` identifies the op among recent ones (the same on every
  // rank); scratch holds the f32 sum of f16 / bf16 tensors. Call only from the thread that runs
  // the group's ops, one op at a time (the op counter is not atomic).
  std::unique_ptr<PendingOp> allreduce(const Tensor& t, ReduceOp op, int tag, Scratch& scratch);

 private:
  struct Header;
  SharedSlots(std::byte* base, size_t bytes, int rank, int size);
  std::byte* slot_of(int rank) const { return base_ + static_cast<size_t>(rank) * stride_; }

  std::byte* base_;     // rank 0's slot
  std::byte* mapping_;  // what mmap returned (the nonce's page, then the slots)
  size_t bytes_;
  size_t stride_;  // bytes per rank's slot
  int rank_, size_;
  uint64_t ops_ = 0;       // shared-memory ops started: the s of the Note
  uint64_t finished_ = 0;  // of which finished (the last one's s)
  template <class T>
  friend class SharedAllreduce;
};

}  // namespace ringgrad::dist::detail
