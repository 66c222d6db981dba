// CommThread: the thread that runs a process group's operations.
//
// An operation is a PendingOp: its start function posts nonblocking calls and returns it, and
// poll() advances it and says whether it finished. CommThread keeps one invariant: a group's
// collectives start in submission order and finish in it, whichever thread runs them (Note
// [Collective order] in dist/process_group.h says why). They run one at a time, except that ops
// the device orders (NCCL's, on one stream) are launched without waiting for the previous one to
// finish (Note [Collectives ordered on the device] in dist/comm_thread.cpp). Sends and receives
// start in submission order too, but do not wait for each other or for the running collective:
// they are polled alongside it. Every op has a deadline, and an op that misses it breaks the group
// (Note [After a timeout]).
//
// Ops run on the thread's own loop (CommThread::loop in dist/comm_thread.cpp), except in two cases
// that each save two thread hand-offs: a small collective submitted to an idle group starts on the
// submitting thread, and a caller that waits for the next queued op runs it itself. Either one
// hands the op over to the thread if it does not finish soon; meanwhile the thread starts nothing.
//
// The thread also keeps the group's counters (GroupStats) and, when asked, one TraceEvent per
// operation on the row "comm:<backend>" of this rank.
//
// Notes: here, at PendingOp, [Polling, not spinning] and [After a timeout]. In dist/comm_thread.cpp,
// next to the code they explain: [Small collectives start on the caller's thread] and [A waiting
// caller runs its op] (ops on a caller's thread), [Short spins before sleeping] and [Spinning for a
// blocked caller] (how the thread waits), [Collectives ordered on the device]. What each of these choices was
// measured to cost: docs/comm_thread_tuning.md.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/trace.h"
#include "dist/process_group.h"
#include "dist/work.h"

namespace ringgrad::dist {

// Note [Polling, not spinning]: poll() must never block: it tests (MPI_Test and the like) and
// returns. The communication thread calls it, and between polls that find the op unfinished it
// sleeps, 1, 2, 4, ... us up to max_poll_sleep_us. A blocking MPI_Wait would busy-poll the network
// inside MPI: where a rank has one core, that spinning thread takes the core the rank's compute
// thread (or another rank) needs, and compute and communication slow each other down instead of
// overlapping. A sleep delays noticing the op's progress by up to its own length (at every ring
// step, say); where that delay is what someone waits for -- a caller blocked on the op -- the
// thread yields between polls instead (Note [Spinning for a blocked caller] in
// dist/comm_thread.cpp). Linux stretches every sleep by the thread's timer slack, 50 us by default,
// so the thread sets its own slack to 1 us.
//
// Note [After a timeout]: MPI cannot cancel a collective another rank never joined. An op whose
// deadline passes, or whose poll() throws a ringgrad::Error, is abandon()ed -- what can be cancelled
// is (posted receives), the rest stays posted -- and kept: it owns its tensors and buffers, which
// MPI may still write into if the late rank ever arrives, so it is never freed (shutdown() leaks
// it). The group is marked broken, and every later op fails at once with a message naming the op
// that timed out or failed.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool poll() = 0;   // true once finished (may throw ringgrad::Error); never blocks
  virtual void abandon() {}  // after a timeout: cancel what can be cancelled
  // For an op that completes on a GPU stream: enqueues a wait for it on the default stream (Note
  // [Waiting on the device] in dist/work.h). Empty for ops that complete on the host.
  virtual std::function<void()> device_wait() const { return nullptr; }
  // True for an op that finishes on a device stream after every op of its group started before it
  // (the nccl backend's: one communication stream per group). The next collective may then start
  // as soon as this one is launched (Note [Collectives ordered on the device]).
  virtual bool ordered_on_device() const { return false; }
};

class CommThread final : public WorkRunner {
 public:
  // rank / size / backend only label error messages.
  CommThread(std::string backend, int rank, int size, double timeout_seconds, int max_poll_sleep_us, bool trace);
  ~CommThread();  // runs the ops already queued (each bounded by the timeout), then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // A sentence a timed-out collective's error ends with: which peers are gone (Note [Who is gone]
  // in dist/group_agreement.h). Set once, before the first op; called on this thread.
  void set_peer_report(std::function<std::string()> report) { peer_report_ = std::move(report); }

  using StartFn = std::function<std::unique_ptr<PendingOp>(uint64_t seq)>;  // called with info.seq

  // Submits an op; its sequence number is assigned here, in call order. Thread-safe. `start`:
  // (uint64_t seq) -> std::unique_ptr<PendingOp>, called once, on this thread or the caller's.
  // A template so that an op started on the caller's thread (Note [Small collectives start on the
  // caller's thread]) calls it in place: only a queued op needs an owning StartFn (an allocation,
  // in an operation whose whole cost is under a microsecond).
  template <class Start>
  std::shared_ptr<Work> submit(OpInfo info, Start start) {
    if (std::shared_ptr<Work> work = claim_if_idle(info)) {
      run_here(work, StartRef(start));
      return work;
    }
    return enqueue(std::move(info), StartFn(std::move(start)));
  }

  // WorkRunner, for the Works this thread creates: wait() first offers to run its op on the
  // waiting thread (Note [A waiting caller runs its op]), and brackets its blocking with
  // caller_blocks() / caller_unblocks() (Note [Spinning for a blocked caller]).
  void run_if_next(Work& work) override;
  void caller_blocks() override { blocked_callers_.fetch_add(1, std::memory_order_relaxed); }
  void caller_unblocks() override { blocked_callers_.fetch_sub(1, std::memory_order_relaxed); }

  void shutdown();  // the destructor's work; callable earlier (derived groups call it first)
  // After shutdown: whether an op timed out or failed (its MPI requests may still be live).
  bool broken() const { return !broken_.empty(); }

  GroupStats stats() const;
  std::vector<TraceEvent> trace_events() const;

 private:
  using Clock = std::chrono::steady_clock;
  // A non-owning reference to a start function, valid while it runs.
  class StartRef {
   public:
    template <class F>
    explicit StartRef(F& f)
        : callable_(&f),
          call_([](void* c, uint64_t seq) -> std::unique_ptr<PendingOp> { return (*static_cast<F*>(c))(seq); }) {}
    std::unique_ptr<PendingOp> operator()(uint64_t seq) const { return call_(callable_, seq); }

   private:
    void* callable_;
    std::unique_ptr<PendingOp> (*call_)(void*, uint64_t);
  };
  struct Task {  // a queued op
    StartFn start;
    std::shared_ptr<Work> work;
    const OpInfo& info() const { return work->info(); }
  };
  struct Running {  // a started op
    Task task;
    std::unique_ptr<PendingOp> op;
    Clock::time_point deadline;
    double start_us = 0;
    // On a caller's thread: complete() then only records the end in end_us / error, and
    // end_on_caller() does the rest.
    bool started_here = false;
    double end_us = 0;
    std::exception_ptr error;
  };
  // What one pass of loop() took from the queue and finished.
  struct Pass {
    std::vector<Task> to_start;  // in submission order; moved from once started, the size kept
    bool adopted = false;        // took over a collective a caller had handed over
    int collectives_done = 0, p2p_done = 0;
  };

  // Submission.
  // Under the lock: when the group is idle and `info` a small collective, takes the group for the
  // caller's thread, assigns the sequence number and returns the op's Work (moved from `info`);
  // otherwise null, and `info` is untouched.
  std::shared_ptr<Work> claim_if_idle(OpInfo& info);
  std::shared_ptr<Work> enqueue(OpInfo info, StartFn start);  // for the communication thread

  // The functions declared inline below are the parts of one bigger function, each called from one
  // place only: inline, so that the compiler puts them back together (on paths where a small
  // collective's whole cost is a fraction of a microsecond). Defined in dist/comm_thread.cpp.

  // On a caller's thread (both Notes on callers). run_here: a claimed op, for up to
  // kStartHereMicroseconds. run_on_caller: starts `running` (claimed: collectives_active_ and
  // starting_here_ set) and polls it for up to `budget`, then completes it there (end_on_caller)
  // or hands it over to this thread (hand_over). from_wait: the caller is in wait() -- the poll
  // loop yields now and then and ends when another op is queued, and other threads may hold the
  // Work; otherwise (submit) the loop is tight and the Work, not yet returned, is finished without
  // a lock.
  void run_here(const std::shared_ptr<Work>& work, StartRef start);
  void run_on_caller(Running& running, StartRef start, std::chrono::microseconds budget, bool from_wait);
  inline bool poll_on_caller(Running& running, StartRef start, std::chrono::microseconds budget, bool from_wait);
  inline void end_on_caller(std::unique_lock<std::mutex>& lock, Running& running, bool from_wait);  // unlocks
  inline void hand_over(std::unique_lock<std::mutex>& lock, Running& running, double handover_us);  // unlocks

  // The communication thread: loop() repeats passes of these, in this order.
  void loop();
  inline void spin_for_next_op() const;            // Note [Short spins before sleeping]
  inline bool take_ops(bool running, Pass& pass);  // under the lock; false: time to end the thread
  inline void count_busy_time(bool was_running, double& last_us);
  inline void start_taken(Pass& pass);
  inline bool may_start_collective() const;  // under the lock
  inline void poll_running(Pass& pass);
  void fail_behind(Pass& pass);   // the oldest running collective broke the group
  inline void end_p2p(int done);  // under the lock
  // Between passes that made no progress; `sleeps` and `idle_since` carry the back-off.
  void back_off(int& sleeps, Clock::time_point idle_since) const;

  // One op, on whichever thread runs it.
  // Starts running.task by calling `start` at `now`: false when it finished at once (failed to
  // start, or the group is broken).
  bool start(Running& running, StartRef start, Clock::time_point now);
  // Polls one running op: true once it finished (its Work is then completed). Without
  // check_deadline the timeout is not looked at (a clock read saved: see poll_on_caller()).
  bool advance(Running& running, bool check_deadline = true);
  void time_out(Running& running);  // Note [After a timeout]
  void abandon(Running& running);   // keeps its op in abandoned_
  void complete(Running& running, std::exception_ptr error);
  void count(const Running& running, bool failed, double end_us);  // stats and trace; under mutex_
  std::string label(const OpInfo& info) const { return describe_op(info, backend_, rank_, size_); }

  const std::string backend_;
  const int rank_, size_;
  const std::chrono::duration<double> timeout_;
  const std::chrono::microseconds max_sleep_;

  mutable std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  uint64_t next_seq_ = 0, next_p2p_seq_ = 0;
  // queue_.size(), +1 while a handed-over op waits for this thread, readable without the mutex: the
  // thread's idle spin and a waiting caller's poll loop end when it changes.
  std::atomic<size_t> queued_{0};
  std::atomic<int> blocked_callers_{0};  // threads blocked in a Work's wait for an op of this thread
  // Under mutex_: what runs, and the counters other threads read.
  int collectives_active_ = 0;            // collectives running here, handed over, or being started by a caller
  int p2p_active_ = 0;                    // that many sends / receives
  bool starting_here_ = false;            // a caller is running a collective: start nothing meanwhile
  std::unique_ptr<Running> handed_over_;  // a caller-started collective for this thread to finish
  bool stopping_ = false;
  GroupStats stats_;
  std::vector<TraceEvent> events_;  // when trace_

  // Touched only by whoever runs ops: this thread, or a caller while starting_here_ (this thread
  // then runs nothing).
  std::string broken_;                                 // why the group is unusable; empty while healthy
  std::vector<std::unique_ptr<PendingOp>> abandoned_;  // See Note [After a timeout]
  // The running collectives, oldest first: one, or several ordered on the device (Note
  // [Collectives ordered on the device]).
  std::deque<std::unique_ptr<Running>> collectives_;
  std::vector<std::unique_ptr<Running>> p2p_;  // running sends / receives

  std::function<std::string()> peer_report_;
  const bool trace_;

  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace ringgrad::dist
