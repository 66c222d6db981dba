// The collective algorithms written here, as PendingOps any group can start (internal).
//
// dist/algorithms/ holds the algorithms; dist/backends/ the backends (mpi, ring, tree, auto,
// hierarchical) whose tables choose among them. Each algorithm is a state machine over nonblocking
// MPI calls that the group's communication thread polls (dist/comm_thread.h): ring_pipeline.cpp
// (the pipelined ring AllReduce and reduce-scatter), low_precision_ring.cpp (the same ring with
// bf16 / FP8 on the wire), ring.cpp (ring all-gather, chain broadcast), tree.cpp
// (recursive doubling), hierarchical.cpp (within nodes, then the ring among their leaders) and
// mpi_library.cpp (the MPI library's own collectives); reduce_kernels.h holds the elementwise
// pieces every reduction shares. Nothing here knows of shared memory (dist/shm/, which uses these
// pieces): a backend chooses between the two.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "dist/algorithms/reduce_kernels.h"
#include "dist/comm_thread.h"
#include "dist/kept_until_exit.h"
#include "dist/process_group.h"
#include "dist/requests.h"

namespace ringgrad::dist::detail {

// Where one collective's messages go: a communicator, this rank's place in it, and the tag that
// keeps this op's messages apart from the previous op's (See GroupBase::submit_collective).
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int tag = 0;
};

// Reusable buffers, owned by a group and used by one op at a time (only its communication thread
// runs ops, one collective at a time). Reuse matters: a fresh large buffer per op costs page faults
// on every call.
class Scratch {
 public:
  std::byte* get(int i, size_t bytes) {  // buffer i (0 or 1) of at least `bytes`
    if (buffers_[i].size() < bytes) {
      buffers_[i].clear();
      buffers_[i].shrink_to_fit();
      buffers_[i].resize(bytes);
    }
    return buffers_[i].data();
  }
  // After a timeout MPI may still write into the buffers: park them until exit.
  void leak() {
    for (auto& b : buffers_) keep_until_exit(std::make_shared<std::vector<std::byte>>(std::move(b)));
  }

 private:
  std::vector<std::byte> buffers_[2];
};

// Calls make(T{}, work, recv) with T the tensor's storage type (u8 is refused), `work` the buffer the
// partial results live in -- the tensor itself, or for f16 / bf16 an accumulation-type copy in
// scratch buffer 0 -- and `recv` scratch buffer 1 of recv_elems
// accumulation-type elements (null for 0). See Note [Half-precision accumulation].
template <class Make>
std::unique_ptr<PendingOp> with_accumulator(Scratch& scratch, const Tensor& t, int64_t recv_elems, Make make) {
  return dispatch_dtype(t.dtype(), [&](auto zero) -> std::unique_ptr<PendingOp> {
    using T = decltype(zero);
    using Acc = compute_t<T>;
    if constexpr (std::is_same_v<T, uint8_t>) {
      RG_FAIL("dist.reduce", "u8 is not supported");  // rejected at submission already
    } else {
      const int64_t n = t.numel();
      T* data = static_cast<T*>(t.raw_data());
      Acc* work = reinterpret_cast<Acc*>(data);
      if (!std::is_same_v<T, Acc>) {
        work = reinterpret_cast<Acc*>(scratch.get(0, n * sizeof(Acc)));
        widen(work, data, n);
      }
      Acc* recv = recv_elems > 0 ? reinterpret_cast<Acc*>(scratch.get(1, recv_elems * sizeof(Acc))) : nullptr;
      return make(zero, work, recv);
    }
  });
}

// Tuning of the ring (GroupOptions carries them).
struct RingTuning {
  size_t segment_bytes = size_t{1} << 20;  // a chunk travels in segments of this many bytes
  int window = 4;                          // receives in flight per direction

  // Accumulation-type elements (of acc_bytes each) per segment, at least one, and in the receive
  // slots the pipeline needs.
  int64_t segment_elems(size_t acc_bytes) const {
    return std::max<int64_t>(1, static_cast<int64_t>(segment_bytes / acc_bytes));
  }
  int64_t slot_elems(size_t acc_bytes) const { return window * segment_elems(acc_bytes); }
};

// t: any shape, reduced in place over the channel's ranks.
std::unique_ptr<PendingOp> ring_allreduce(const Tensor& t, ReduceOp op, Channel ch, Scratch& scratch,
                                          RingTuning tuning);
// input: (N * m) elements, output: (m); rank r's output = op over ranks of input block r.
std::unique_ptr<PendingOp> ring_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, Channel ch,
                                               Scratch& scratch, RingTuning tuning);
// The pipelined ring AllReduce of n partial sums held in their accumulation type (Acc: float,
// double, int32_t or int64_t), in place and not divided for AVG: hierarchical's stage among leaders.
template <class Acc>
std::unique_ptr<PendingOp> ring_allreduce_sums(Acc* sums, int64_t n, ReduceOp op, Channel ch, Acc* slots,
                                               RingTuning tuning);
// t: (n) f32, f16 or bf16, reduced in place (sum or avg) with every message in how.wire (Note
// [Low-precision ring] in low_precision_ring.cpp); work in scratch buffers 0 (f16 / bf16) and 1.
std::unique_ptr<PendingOp> low_precision_ring_allreduce(const Tensor& t, ReduceOp op, const LowPrecisionAllreduce& how,
                                                        Channel ch, Scratch& scratch);
// input: (N * m) f32, f16 or bf16, unchanged; output: (m) of its dtype, rank r's = op over ranks of
// input block r: the same ring's first half alone, ending on chunk r (Note [Low-precision ring]).
std::unique_ptr<PendingOp> low_precision_ring_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                             const LowPrecisionAllreduce& how, Channel ch,
                                                             Scratch& scratch);
// input: S, output: (N, *S).
std::unique_ptr<PendingOp> ring_allgather(const Tensor& output, const Tensor& input, Channel ch);
std::unique_ptr<PendingOp> chain_broadcast(const Tensor& t, int root, Channel ch);
// t: any shape, reduced in place by recursive doubling.
std::unique_ptr<PendingOp> tree_allreduce(const Tensor& t, ReduceOp op, Channel ch, Scratch& scratch);

// The MPI library's own nonblocking collectives (mpi_library.cpp). f16 / bf16 have no MPI datatype:
// allreduce and reduce_scatter widen them into an f32 scratch copy, reduce that and round once
// (Note [Half-precision accumulation]); AVG is an MPI_SUM and one division (Note [Where AVG divides]).
// t: any shape, reduced in place (MPI_Iallreduce).
std::unique_ptr<PendingOp> mpi_allreduce(const Tensor& t, ReduceOp op, Channel ch, Scratch& scratch);
// t: any shape, root's bytes everywhere (MPI_Ibcast).
std::unique_ptr<PendingOp> mpi_broadcast(const Tensor& t, int root, Channel ch);
// input: S, output: N blocks of S, as bytes (MPI_Iallgather).
std::unique_ptr<PendingOp> mpi_allgather(const Tensor& output, const Tensor& input, Channel ch);
// input: (N * m) elements, output: (m) (MPI_Ireduce_scatter_block, in the accumulation type).
std::unique_ptr<PendingOp> mpi_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, Channel ch,
                                              Scratch& scratch);

// The nodes of the hierarchical AllReduce, as backend "hierarchical" splits the group.
struct Topology {
  MPI_Comm node = MPI_COMM_NULL;     // the ranks of this node
  MPI_Comm leaders = MPI_COMM_NULL;  // node leaders only (MPI_COMM_NULL elsewhere)
  int node_rank = 0, node_size = 1;
  int leader_rank = 0, num_nodes = 1;  // valid on leaders
};
// t: any shape, reduced in place over the world_size ranks of topo's nodes: within each node to its
// leader, among the leaders by the ring, then broadcast within each node.
std::unique_ptr<PendingOp> hierarchical_allreduce(const Tensor& t, ReduceOp op, int tag, const Topology& topo,
                                                  int world_size, Scratch& scratch, RingTuning tuning);

}  // namespace ringgrad::dist::detail
