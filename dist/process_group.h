// ProcessGroup: the collectives data parallelism needs, on CPU tensors, each asynchronous.
//
// N is the world size. Tensors must be defined, contiguous, on the CPU, of dtype f32, f64, f16,
// bf16, i32 or i64 (allreduce) or any dtype (broadcast, allgather: they move bytes).
//
//   auto pg = dist::new_group("ring");                 // or "mpi"
//   auto work = pg->allreduce(grad, dist::ReduceOp::avg);
//   ... compute ...
//   work->wait();                                      // grad now holds the mean over ranks
//
// Note [Collective order]: every rank must issue the same collectives on a group in the same order
// (same op, same element count, same dtype, same root). Each group runs its collectives one at a
// time, in submission order, on its own communication thread, so the k-th collective of rank 0
// meets the k-th collective of every other rank. A rank that skips or reorders one makes the others
// wait: after the group's timeout (default 300 s, RINGGRAD_COLLECTIVE_TIMEOUT seconds, or
// GroupOptions::timeout_seconds) their wait() throws an error naming the rank, the op, its sequence
// number, its byte count and the backend. The group is then unusable (later collectives fail at
// once); create a new one, or better end the job. Two groups are independent: each has its own
// communicator (MPI_Comm_dup) and thread.
//
// Note [Where AVG divides]: ReduceOp::avg sums in the accumulation type, then divides by N once,
// just before rounding to the tensor's dtype: in `ring`, by the rank that owns each chunk after the
// reduce-scatter (so every rank receives identical bits); in `mpi`, by every rank after the
// MPI_Iallreduce sum. Integer dtypes divide with C++ truncation toward zero.
//
// Note [Half-precision accumulation]: f16 and bf16 are summed in f32 and rounded once at the end,
// so the result does not depend on N's order of additions at 11 (8) bits. `ring` sends f32 partial
// sums during its reduce-scatter and f16/bf16 in its all-gather; `mpi` reduces an f32 copy.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "dist/work.h"

namespace ringgrad::dist {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", ...

struct GroupOptions {
  // Seconds one collective may run before wait() throws. Unset: RINGGRAD_COLLECTIVE_TIMEOUT, else 300.
  std::optional<double> timeout_seconds;
  // The communication thread sleeps at most this long between polls of an unfinished collective.
  // See Note [Polling, not spinning] in dist/comm_thread.h.
  int max_poll_sleep_us = 100;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& backend() const = 0;  // "mpi", "ring"
  virtual double timeout_seconds() const = 0;

  // t: any shape; every rank's t becomes op over all ranks' t, elementwise.
  virtual std::shared_ptr<Work> allreduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // t: any shape; every rank's t becomes root's t.
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root) = 0;
  // input: S (any shape), output: (N, *S) of input's dtype; output[r] becomes rank r's input.
  virtual std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input) = 0;
  // Completes once every rank has issued it.
  virtual std::shared_ptr<Work> barrier() = 0;
};

// A process group over all ranks of the world, with the backend named at run time:
//   "mpi"  the MPI library's nonblocking collectives (MPI_Iallreduce, ...)
//   "ring" ring reduce-scatter + all-gather over MPI point-to-point (dist/ring.cpp)
//   "tree" recursive-doubling AllReduce for small messages (dist/tree.cpp); broadcast and
//          all-gather are MPI's
// Collective: every rank must call it, in the same order as other group creations.
std::unique_ptr<ProcessGroup> new_group(const std::string& backend, const GroupOptions& options = {});

// RINGGRAD_COLLECTIVE_TIMEOUT as seconds, or 300 when unset. Throws on a malformed value.
double default_collective_timeout();

}  // namespace ringgrad::dist
