// GroupBase: what every MPI-based backend shares (internal). It owns the group's communicator (a
// duplicate of MPI_COMM_WORLD, so its messages never match another group's), the communication
// thread, reusable scratch buffers, and the argument checks. A backend supplies only start_*: post
// the nonblocking MPI calls of one collective and return a PendingOp that finishes it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/comm_thread.h"
#include "dist/process_group.h"
#include "dist/reduce_kernels.h"

namespace ringgrad::dist::detail {

class GroupBase : public ProcessGroup {
 public:
  GroupBase(std::string backend, const GroupOptions& options);
  ~GroupBase() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }
  double timeout_seconds() const override { return timeout_seconds_; }

  std::shared_ptr<Work> allreduce(const Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override;
  std::shared_ptr<Work> allgather(const Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> barrier() override;

 protected:
  // Called on the communication thread. `tag` is unique to this op among recent ones (p2p backends).
  virtual std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) = 0;
  // Defaults: MPI_Ibcast / MPI_Iallgather (bytes). Backends with their own algorithms override them.
  virtual std::unique_ptr<PendingOp> start_broadcast(const Tensor& t, int root, int tag);
  virtual std::unique_ptr<PendingOp> start_allgather(const Tensor& output, const Tensor& input, int tag);
  // Both backends use MPI_Ibarrier: a barrier moves no data, so a hand-written one saves nothing.
  virtual std::unique_ptr<PendingOp> start_barrier(int tag);

  // For start_allreduce: calls make(T{}, work, recv) with T the tensor's storage type (u8 is refused),
  // work the buffer partial results live in -- the tensor itself, or for f16 / bf16 an f32 scratch
  // copy, already widened (Note [Half-precision accumulation]) -- and recv a scratch buffer of
  // recv_elems accumulation-type elements (null for 0).
  template <class Make>
  std::unique_ptr<PendingOp> with_accumulator(const Tensor& t, int64_t recv_elems, Make make) {
    return dispatch_dtype(t.dtype(), [&](auto zero) -> std::unique_ptr<PendingOp> {
      using T = decltype(zero);
      using Acc = compute_t<T>;
      if constexpr (std::is_same_v<T, uint8_t>) {
        RG_FAIL("dist.allreduce", "u8 is not supported");  // rejected at submission already
      } else {
        const int64_t n = t.numel();
        T* data = static_cast<T*>(t.raw_data());
        Acc* work = reinterpret_cast<Acc*>(data);
        if constexpr (!std::is_same_v<T, Acc>) {
          work = reinterpret_cast<Acc*>(scratch(0, n * sizeof(Acc)));
          widen(work, data, n);
        }
        Acc* recv = recv_elems > 0 ? reinterpret_cast<Acc*>(scratch(1, recv_elems * sizeof(Acc))) : nullptr;
        return make(zero, work, recv);
      }
    });
  }

  // Derived destructors call this first: queued ops still call start_* above.
  void shutdown() { comm_thread_->shutdown(); }

  // Scratch buffer `i` (0 or 1) of at least `bytes`, reused across ops (only the comm thread runs
  // ops, one at a time). Reuse matters: allocating a fresh large buffer per op costs page faults
  // on every call.
  std::byte* scratch(int i, size_t bytes);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;

 private:
  std::shared_ptr<Work> submit(const std::string& name, std::string detail, size_t bytes,
                               std::function<std::unique_ptr<PendingOp>(int tag)> start);
  std::string backend_;
  double timeout_seconds_;
  std::vector<std::byte> scratch_[2];
  std::unique_ptr<CommThread> comm_thread_;
};

// Throws unless t is defined, contiguous and on the CPU; `op` and `what` name it in the message.
void check_tensor(const char* op, const char* what, const Tensor& t, int rank, int size);
// MPI counts are ints: throws when n does not fit.
int checked_count(const char* op, int64_t n, int rank);

}  // namespace ringgrad::dist::detail
