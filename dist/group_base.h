// GroupBase: what every MPI-based backend shares (internal). It owns the group's communicators
// (duplicates of MPI_COMM_WORLD, so its messages never match another group's), the communication
// thread, reusable scratch buffers, the argument checks, point-to-point send / recv and the debug
// check. A backend supplies only start_*: post the nonblocking MPI calls of one collective and
// return a PendingOp that finishes it. The defaults are the MPI library's collectives.
//
// Note [Debug mode]: with RINGGRAD_DIST_DEBUG=1 (or GroupOptions::debug_check) every collective
// first all-gathers a fingerprint -- op name, reduce op or root, shape, dtype -- from every rank over
// a communicator of its own, and compares. On a difference every rank fails the collective with
// the same error listing each rank's view, and the group becomes unusable: a desynchronised job
// stops at the first wrong collective with a diagnosis, instead of computing garbage (same byte
// count, different meaning) or hanging until the timeout. It costs one small all-gather per
// collective, so it is off by default. A rank that skipped a collective is caught when it issues
// its next one (whose fingerprint differs); one that issues nothing more still ends in the timeout.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dist/algorithms.h"
#include "dist/comm_thread.h"
#include "dist/process_group.h"
#include "dist/shared_buffer.h"
#include "dist/shared_memory.h"

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
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& t, int src, int tag) override;
  // Note [Shared gradient buffers] where shared_slots_ is set (every rank on this machine, shared
  // memory allowed), else the ordinary buffer.
  Tensor new_reduction_buffer(int64_t numel, DType dtype, Device device) override;
  bool reduces_in_place(const Tensor& t) const override { return shared_buffer_of(t) != nullptr; }

  GroupStats stats() const override { return comm_thread_->stats(); }
  std::vector<TraceEvent> trace_events() const override { return comm_thread_->trace_events(); }

 protected:
  // Called on the communication thread. `tag` is unique to this op among recent ones (p2p backends).
  virtual std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) = 0;
  // Defaults: MPI_Ibcast / MPI_Iallgather (bytes) / MPI_Ireduce_scatter_block (in the accumulation
  // type). Backends with their own algorithms override them.
  virtual std::unique_ptr<PendingOp> start_broadcast(const Tensor& t, int root, int tag);
  virtual std::unique_ptr<PendingOp> start_allgather(const Tensor& output, const Tensor& input, int tag);
  virtual std::unique_ptr<PendingOp> start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                          int tag);
  // Every backend uses MPI_Ibarrier: a barrier moves no data, so a hand-written one saves nothing.
  virtual std::unique_ptr<PendingOp> start_barrier(int tag);

  // Derived destructors call this first: queued ops still call start_* above.
  void shutdown() { comm_thread_->shutdown(); }

  Channel channel(int tag) const { return Channel{comm_, rank_, size_, tag}; }
  // Maps shared_slots_ when options (or RINGGRAD_DIST_SHM) allow and every rank is on this machine.
  // Collective: a backend's constructor calls it on every rank.
  void use_shared_memory(const GroupOptions& options);

  // A backend that moves GPU memory itself (nccl) sets its device: collectives then take tensors on
  // that device as they are, instead of staging them through the host (Note [CUDA tensors through
  // host staging] in group_base.cpp), and stage CPU tensors through that device instead.
  void set_native_device(Device device) { native_device_ = device; }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  Scratch scratch_;
  RingTuning ring_tuning_;
  std::unique_ptr<SharedSlots> shared_slots_;  // null: small AllReduces go over MPI

 private:
  // info: the op's name, detail and bytes (OpInfo). start: (int tag) -> std::unique_ptr<PendingOp>,
  // called on the communication thread (or the caller's: see CommThread::submit).
  template <class Start>
  std::shared_ptr<Work> submit_collective(OpInfo info, Start start) {
    if (debug_check_) return submit_checked(std::move(info), std::move(start));
    return comm_thread_->submit(std::move(info),
                                [start = std::move(start)](uint64_t seq) { return start(collective_tag(seq)); });
  }
  // MPI guarantees tags up to 32767; consecutive ops get different tags, so a timed-out op's late
  // messages never match the next op's receives.
  static int collective_tag(uint64_t seq) { return static_cast<int>(seq % 32768); }
  // submit_collective under Note [Debug mode].
  std::shared_ptr<Work> submit_checked(OpInfo info, std::function<std::unique_ptr<PendingOp>(int tag)> start);
  std::shared_ptr<Work> submit_p2p(OpInfo info, std::function<std::unique_ptr<PendingOp>()> start);
  void check_peer(const char* op, int peer, int tag, const Tensor& t) const;
  // The live shared buffer t lies in, or null (the ordinary path).
  std::shared_ptr<SharedBuffer> shared_buffer_of(const Tensor& t) const;
  // The tensor a collective's start_* works on: t itself, or its host copy (inputs) / a host
  // buffer copied back on completion (outputs).
  Device work_device() const;
  void check_stageable(const char* op, const Tensor& t) const;
  Tensor stage_in(const char* op, const Tensor& t) const;
  Tensor stage_out(const char* op, const Tensor& t) const;

  std::string backend_;
  double timeout_seconds_;
  bool debug_check_ = false;
  std::string trace_path_;             // written at destruction when set
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // send / recv: user tags never meet collective tags
  MPI_Comm debug_comm_ = MPI_COMM_NULL;
  std::shared_ptr<CommThread> comm_thread_;  // shared with the Works it may run (weak_ptr)
  std::optional<Device> native_device_;
  // Buffers from new_reduction_buffer that live in shared memory; each dies with its last tensor.
  mutable std::mutex shared_buffers_mutex_;
  std::vector<std::weak_ptr<SharedBuffer>> shared_buffers_;
  std::atomic<bool> any_shared_buffers_{false};  // lets every other AllReduce skip the lock
};

// Every collective by the ring algorithms (dist/ring.cpp): backend "ring" itself, and the base of
// backends that replace only its AllReduce ("auto").
class RingFamilyGroup : public GroupBase {
 public:
  RingFamilyGroup(std::string backend, const GroupOptions& options) : GroupBase(std::move(backend), options) {}
  ~RingFamilyGroup() override { shutdown(); }

 protected:
  std::unique_ptr<PendingOp> start_allreduce(const Tensor& t, ReduceOp op, int tag) override;
  std::unique_ptr<PendingOp> start_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                                  int tag) override;
  std::unique_ptr<PendingOp> start_broadcast(const Tensor& t, int root, int tag) override;
  std::unique_ptr<PendingOp> start_allgather(const Tensor& output, const Tensor& input, int tag) override;
};

// Throws unless t is defined and contiguous; `op` and `what` name it in the message.
void check_tensor(const char* op, const char* what, const Tensor& t, int rank, int size);
// MPI counts are ints: throws when n does not fit.
int checked_count(const char* op, int64_t n, int rank);

}  // namespace ringgrad::dist::detail
