// Work: the handle every collective returns.
//
// Contract (what callers may rely on):
// - A collective is submitted when the ProcessGroup call returns; it runs later on the group's
//   communication thread (see Note [Collective order] in dist/process_group.h). Until the Work is
//   completed, the tensors passed in must stay alive and must not be read or written by the caller.
// - wait() blocks until the collective finished on this rank. It returns normally when the result
//   is in the tensor, and throws the collective's ringgrad::Error when it failed or timed out.
// - wait(timeout) waits at most `timeout`: false when still running, true when finished; a failed
//   collective throws, as in wait().
// - is_completed() never blocks; it is true for failed collectives too (check error()).
// - wait() on an op that has not started yet, with nothing running before it, runs the op on the
//   waiting thread (Note [A waiting caller runs its op] in dist/comm_thread.cpp); otherwise waiting
//   sleeps on a condition variable and never spins.
// - wait_on_device() is wait() for a GPU consumer (Note [Waiting on the device]).
//
// Note [Waiting on the device]: an op whose result a GPU stream produces (nccl) can be waited for
// by the GPU instead of the host: wait_on_device() blocks only until the op has been launched, then
// makes the default stream wait for the op's completion event (cudaStreamWaitEvent) and returns.
// Kernels launched afterwards run after the op; the host goes on queueing them meanwhile. An op that
// completes on the host (the MPI backends, staged tensors, CPU tensors) has no such event, and
// wait_on_device() waits for it as wait() does. A failure of a device-waited op is reported by the
// next wait() or is_completed() / error() on the Work -- DDP checks them before its next forward.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/tensor.h"

namespace ringgrad::dist {

class Work;

// What a Work needs from the thread that runs its op (CommThread, dist/comm_thread.h), for one
// reason: a caller that waits for the op concerns that thread. It may run the op on the waiting
// thread (Note [A waiting caller runs its op] in dist/comm_thread.cpp), and it polls without
// sleeping while a caller is blocked (Note [Spinning for a blocked caller], same file). A Work holds
// its runner weakly, as it may outlive its group; that weak_ptr is the runner's own weak_from_this()
// (hence enable_shared_from_this here: converting a weak_ptr<CommThread> would lock it, two atomic
// operations per op).
class WorkRunner : public std::enable_shared_from_this<WorkRunner> {
 public:
  // Called by wait() first: runs `work`'s op to its end on the calling thread when the op may run
  // there now; otherwise returns at once.
  virtual void run_if_next(Work& work) = 0;
  // Bracket a wait's blocking (BlockedCaller in dist/work.cpp).
  virtual void caller_blocks() = 0;
  virtual void caller_unblocks() = 0;

 protected:
  ~WorkRunner() = default;
};

// What an operation is, for error messages. Its detail is formatted only when a message needs it:
// formatting "sum, (1000,) f32 cpu" (ostringstream, Tensor::desc) for every op would cost a small
// AllReduce a large share of its time, for a description that is almost never read. The detail is
// a plain function of the op's operands rather than a closure holding them: such a closure does not
// fit in std::function's inline storage, and would cost an allocation per op.
struct OpInfo {
  // What the detail is formatted from: the tensors and integer arguments the op works on. Holding
  // the tensors keeps them describable after the op.
  struct Operands {
    Tensor tensor{};   // the op's tensor: allgather's and reduce_scatter's input
    Tensor output{};   // reduce_scatter's output (undefined for the others)
    int argument = 0;  // the ReduceOp (allreduce, reduce_scatter), the root (broadcast) or the peer (send, recv)
    int tag = 0;       // send, recv
  };
  std::string name;                                  // "allreduce"
  std::string (*detail)(const Operands&) = nullptr;  // -> "sum, (1000,) f32 cpu"
  Operands operands{};
  uint64_t seq = 0;  // collectives: 0, 1, 2, ... per group, the same on every rank; p2p: its own count
  size_t bytes = 0;  // this rank's tensor bytes
  bool p2p = false;  // send / recv: concurrent, outside the collective order
};

// "allreduce #7 (sum, (1000,) f32 cpu, 4000 bytes) on backend 'ring', rank 0/2"
std::string describe_op(const OpInfo& info, const std::string& backend, int rank, int size);

class Work {
 public:
  // The Work keeps the op's OpInfo: whoever runs the op reads it from here (one copy per op, not
  // one per owner: a small AllReduce's whole cost is well under a microsecond). runner: the
  // communication thread of the op's group (WorkRunner above); none for a Work no one can run.
  Work(OpInfo info, std::string backend, int rank, int size, std::weak_ptr<WorkRunner> runner = {})
      : info_(std::move(info)), backend_(std::move(backend)), rank_(rank), size_(size), runner_(std::move(runner)) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();
  bool wait(std::chrono::duration<double> timeout);
  void wait_on_device();  // Note [Waiting on the device]
  bool is_completed() const;
  bool is_success() const;           // completed without error
  std::exception_ptr error() const;  // null while running or after success
  // "allreduce #7 (sum, (1000,) f32 cpu, 4000 bytes) on backend 'ring', rank 0/2": what this Work
  // is, for messages. Built when asked for (most never are).
  std::string description() const { return describe_op(info_, backend_, rank_, size_); }
  const OpInfo& info() const { return info_; }

  // When the op was started and finished (trace_clock_us(), core/trace.h), on whichever thread ran it; 0
  // until completed. DDP uses them for its overlap figures and trace rows.
  double start_us() const;
  double end_us() const;

  // Called once by the thread that ran the op (CommThread): it ended (error null on success).
  void finish(std::exception_ptr error = nullptr, double start_us = 0, double end_us = 0);
  // finish() for a Work no other thread can hold yet (its op completed on the caller's thread
  // before submit returned the Work): no lock, and no waiter to wake.
  void finish_unobserved(std::exception_ptr error, double start_us, double end_us);
  // Called by the thread that launched an op that completes on a device: makes the
  // default stream wait for it (Note [Waiting on the device]).
  void set_device_wait(std::function<void()> enqueue_wait);

 private:
  const OpInfo info_;
  const std::string backend_;
  const int rank_, size_;
  const std::weak_ptr<WorkRunner> runner_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  // done_, readable without the mutex: a wait() for a finished op (a small collective that
  // completed on the caller's thread) then takes no lock. Stored after error_, never changed after.
  std::atomic<bool> finished_{false};
  std::exception_ptr error_;
  double start_us_ = 0, end_us_ = 0;
  std::function<void()> device_wait_;
};

}  // namespace ringgrad::dist
