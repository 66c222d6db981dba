// GroupBase: what every backend shares (internal) -- the MPI ones (dist/backends/mpi_group.h) and
// nccl alike. It owns the group's communication thread (order, timeouts, stats, trace), checks
// every operation's arguments, stages tensors to where the backend works on them (dist/staging.h:
// the only place it looks at devices), and runs send / recv, the barrier and the debug check over
// the group's MPI communicators (dist/mpi_comms.h: the only place it touches MPI). A backend
// supplies only its table of collectives (Collectives below, Note [One table per backend]): how to
// start each one on the staged tensors, as a PendingOp that finishes it.
//
// dist/ itself is the process-group core, what every group is made of: init (the MPI world),
// process_group.h (the public API), work / comm_thread / requests (how an operation runs) and this
// base with its two seams, staging and mpi_comms. Around it, the wings: backends/ (one file per
// backend, named as new_group names it, and MpiGroupBase), algorithms/ (the collective algorithms
// as PendingOps), shm/ (one machine's shared memory) and ddp/ (DistributedDataParallel, built on
// the public ProcessGroup alone).
//
// What it does not hold is the MPI data path -- scratch buffers, ring tuning, shared-memory slots
// and reduction buffers, MPI's own collectives -- which only backends that move tensors over MPI
// use: MpiGroupBase (dist/backends/mpi_group.h). nccl moves tensors with NCCL; it uses MPI for its
// bootstrap and, through this class, for what every backend runs over the communicators.
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

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm_thread.h"
#include "dist/group_agreement.h"
#include "dist/process_group.h"
#include "dist/simulated_network.h"
#include "dist/staging.h"

namespace ringgrad::dist::detail {

class MpiComms;  // dist/mpi_comms.h

// Note [One table per backend]: a backend is the table of how it starts each collective -- a
// factory per operation that starts it on tensors where the backend works (staged already:
// dist/staging.h) and returns the PendingOp the communication thread polls, `tag` unique to this op
// among recent ones (for algorithms over point-to-point messages). Each backend file fills in its
// table in its constructor, from the algorithms of dist/algorithms/ (or NCCL's calls), so what a
// backend does is read in one place; GroupBase checks, routes and submits, and never asks which
// backend it is. (A barrier moves no data: every backend's is MPI_Ibarrier, here.)
struct Collectives {
  std::function<std::unique_ptr<PendingOp>(const Tensor& t, ReduceOp op, int tag)> allreduce;
  std::function<std::unique_ptr<PendingOp>(const Tensor& t, int root, int tag)> broadcast;
  std::function<std::unique_ptr<PendingOp>(const Tensor& output, const Tensor& input, int tag)> allgather;
  std::function<std::unique_ptr<PendingOp>(const Tensor& output, const Tensor& input, ReduceOp op, int tag)>
      reduce_scatter;
  // Empty where the backend has none (ProcessGroup::allreduce_low_precision and
  // reduce_scatter_low_precision refuse then).
  std::function<std::unique_ptr<PendingOp>(const Tensor& t, ReduceOp op, const LowPrecisionAllreduce& how, int tag)>
      allreduce_low_precision;
  std::function<std::unique_ptr<PendingOp>(const Tensor& output, const Tensor& input, ReduceOp op,
                                           const LowPrecisionAllreduce& how, int tag)>
      reduce_scatter_low_precision;
};

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
  std::shared_ptr<Work> allreduce_low_precision(const Tensor& t, ReduceOp op,
                                                const LowPrecisionAllreduce& how) override;
  std::shared_ptr<Work> reduce_scatter_low_precision(const Tensor& output, const Tensor& input, ReduceOp op,
                                                     const LowPrecisionAllreduce& how) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& t, int src, int tag) override;
  // new_in_place_buffer's where the backend has one, else the ordinary buffer.
  Tensor new_reduction_buffer(int64_t numel, DType dtype, Device device) override;
  bool reduces_in_place(const Tensor& t) const override {
    return t.defined() && staging_.in_place_buffer(t) != nullptr;
  }

  GroupStats stats() const override { return comm_thread_->stats(); }
  std::vector<TraceEvent> trace_events() const override { return comm_thread_->trace_events(); }

 protected:
  // A backend that reduces some buffers in place (MpiGroupBase: Note [Shared gradient buffers]):
  // the buffer new_reduction_buffer returns -- one whose storage is an InPlaceBuffer (Note [Buffers
  // that reduce themselves] in dist/staging.h) -- or an undefined tensor for the ordinary one
  // (arguments already checked).
  virtual Tensor new_in_place_buffer(int64_t numel, DType dtype, Device device) {
    (void)numel, (void)dtype, (void)device;
    return Tensor();
  }
  // The Work of a reduce-scatter through a reserved staging buffer (Note [Reduce-scatter through a
  // shared buffer]), else null.
  virtual std::shared_ptr<Work> reduce_scatter_staged(const OpInfo& info, const Tensor& output, const Tensor& input,
                                                      ReduceOp op) {
    (void)info, (void)output, (void)input, (void)op;
    return nullptr;
  }

  // Every backend's constructor sets its table once (Note [One table per backend]).
  void set_collectives(Collectives collectives) { collectives_ = std::move(collectives); }

  // Derived destructors call this first: queued ops still call their table's factories.
  void shutdown() { comm_thread_->shutdown(); }
  // After shutdown(): whether an op failed or timed out, so that MPI may still be working on the
  // group's requests (Note [After a timeout] in dist/comm_thread.h).
  bool broken() const { return comm_thread_->broken(); }

  // A backend that moves GPU memory itself (nccl) sets its device (Staging::set_native_device).
  void set_native_device(Device device) { staging_.set_native_device(device); }
  // Where the group's tensors are worked on: a backend asks it before offering anything that works
  // on a tensor in place (Staging::stages).
  const Staging& staging() const { return staging_; }

  // The group's communicators: MPI backends run their data path over comm(), nccl its bootstrap.
  MpiComms& comms() const { return *comms_; }

  // info: the op's name, detail and bytes (OpInfo). start: (int tag) -> std::unique_ptr<PendingOp>,
  // called on the communication thread (or the caller's: see CommThread::submit).
  template <class Start>
  std::shared_ptr<Work> submit_collective(OpInfo info, Start start) {
    if (debug_check_ || link_.on()) return submit_decorated(std::move(info), std::move(start));
    return comm_thread_->submit(std::move(info),
                                [start = std::move(start)](uint64_t seq) { return start(collective_tag(seq)); });
  }

  int rank_ = 0, size_ = 1;

 private:
  // MPI guarantees tags up to 32767; consecutive ops get different tags, so a timed-out op's late
  // messages never match the next op's receives.
  static int collective_tag(uint64_t seq) { return static_cast<int>(seq % 32768); }
  // submit_collective under Note [Debug mode] or Note [Simulated network]: the op decorated.
  std::shared_ptr<Work> submit_decorated(OpInfo info, std::function<std::unique_ptr<PendingOp>(int tag)> start);
  // The Work of a GPU collective in a world of one, completed without staging or sending.
  std::shared_ptr<Work> completed_alone(OpInfo info);
  std::shared_ptr<Work> submit_p2p(OpInfo info, std::function<std::unique_ptr<PendingOp>()> start);
  void check_peer(const char* op, int peer, int tag, const Tensor& t) const;

  std::string backend_;
  double timeout_seconds_;
  bool debug_check_ = false;
  std::string trace_path_;  // written at destruction when set
  std::unique_ptr<MpiComms> comms_;
  std::vector<CreationRecord> peers_;  // every rank's, by rank (Note [Agreed at creation])
  Staging staging_;
  SimulatedLink link_;                       // Note [Simulated network]
  std::shared_ptr<CommThread> comm_thread_;  // shared with the Works it may run (weak_ptr)
  Collectives collectives_;
};

// Throws unless t is defined and contiguous; `op` and `what` name it in the message.
void check_tensor(const char* op, const char* what, const Tensor& t, int rank, int size);
// MPI counts are ints: throws when n does not fit.
int checked_count(const char* op, int64_t n, int rank);

}  // namespace ringgrad::dist::detail
