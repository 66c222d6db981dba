// CommThread: the one thread that runs a process group's operations, in submission order.
//
// An operation is a PendingOp: start() (called on this thread, or on a caller's: see the two Notes
// on callers below) posts nonblocking MPI calls, poll() advances it and says whether it finished.
// The thread polls the running collective until it finishes or its deadline passes, then completes
// its Work and takes the next one. See Note
// [Collective order] in dist/process_group.h for why collectives never overlap or reorder.
// Point-to-point ops (send / recv) start in submission order too but do not wait for each other or
// for the running collective: they are polled alongside it, each with its own deadline.
//
// The thread also keeps the group's counters (GroupStats) and, when asked, one TraceEvent per
// operation on the row "comm:<backend>" of this rank.
//
// Note [Polling, not spinning]: the thread calls MPI_Test (inside poll()), and between unsuccessful
// polls it sleeps, 1, 2, 4, ... us up to max_poll_sleep_us. A blocking MPI_Wait would busy-poll the
// network inside MPI, and on a two-core machine with two ranks that spinning thread takes the core
// the rank's compute thread (or the other rank) needs, so compute and communication would slow each
// other instead of overlapping. Sleeping costs up to one sleep of latency per ring step; where that
// latency is what someone waits for, a blocked caller, the thread yields instead (Note [Spinning
// for a blocked caller]). It used to yield for the first 50 us of every op without progress as
// well; in W1 that cost the rank the step waits for ~0.1 ms of its core per step (its
// communication thread's CPU, 0.38-0.69 -> 0.34-0.60 ms in interleaved runs; docs/ddp.md), and
// dropping it moved allreduce_bench by no more than its noise. Linux stretches every sleep by the
// thread's timer slack (50 us by default: a "1 us" sleep takes ~55 us), so the thread sets its
// slack to 1 us.
//
// Note [Short spins before sleeping]: a small collective takes a few microseconds on the wire, but
// waking a sleeping thread costs about as much again. So after its last op the thread polls its
// queue for up to kSpinMicroseconds, yielding the core between polls, before it sleeps: back-to-back
// collectives skip the wake-up, while an idle group costs nothing. Only after an op of its own
// ended: woken for an op that a caller took meanwhile (Note [A waiting caller runs its op]), the
// thread goes back to sleep at once rather than take turns on the core with that caller's polls.
// (A caller waiting for an op this thread runs does not spin: on a machine with fewer cores than
// threads its spinning slowed the communication threads more than it saved -- measured,
// docs/dist.md.)
//
// Note [Small collectives start on the caller's thread]: handing an op to this thread and its
// completion back costs two thread wake-ups, ~15-20 us on a two-core machine -- several times the
// wire time of a 4 KiB AllReduce. So when the group is idle (nothing running or queued) a collective
// of at most kStartHereBytes is started by the submitting thread itself, which polls it for up to
// kStartHereMicroseconds. When the peers are there too (a synchronous loop), it completes before
// submit returns, with no thread involved. Otherwise it is handed over and this thread finishes it:
// the caller loses at most those microseconds, and computation still overlaps the rest. Order is
// kept: an op submitted meanwhile queues behind it (collective_active_), and this thread starts
// nothing while a caller is starting one (starting_here_) -- one thread runs ops at a time.
//
// Note [A waiting caller runs its op]: a caller that submits a collective and waits for it at once
// (a blocking loop such as allreduce_bench's) pays two thread hand-offs, and this thread's polling
// then slept between polls: ~5-10% of a 1-2 MiB AllReduce (measured, docs/dist.md). So wait() on
// an op that is next in the queue, with nothing running and no send / recv queued, takes it out
// of the queue and runs it on the waiting thread, which has nothing else to do: it polls with a
// yield every 16th poll (the core stays free for other processes' threads), for up to
// kWaitHereMicroseconds or until another op is queued (a send / recv must not wait behind it), and
// then hands it over as in Note [Small collectives start on the caller's thread], whose
// ordering rules (starting_here_) it shares. wait(timeout) and wait_on_device() do not do this:
// they must not run an op longer than asked, or block the host for a device's op.
//
// Note [Spinning for a blocked caller]: the sleeps of Note [Polling, not spinning] keep this thread
// off the core while the rank's compute thread needs it. Once that thread blocks in wait() for an
// op that runs here, the core has nothing else to do, and a sleep only delays the op: in DDP the
// rank that finished its backward first waits for the other's last bucket, and, asleep, it noticed
// the other's arrival up to a sleep late -- time the other rank, the one the step waits for, spent
// waiting for its share of the reduction (Note [Shared gradient buffers]). So while a caller is
// blocked in wait() or wait_on_device() the thread yields between polls instead of sleeping, for up
// to kBlockedSpinMicroseconds without progress. A yield still lets any other runnable thread on the
// core go first (more ranks than cores: the np 3 and 4 tests took no longer); beyond that bound -- a
// peer that is very late or never comes -- the thread sleeps again.
//
// Note [After a timeout]: MPI cannot cancel a collective another rank never joined. The timed-out op
// is kept (it owns its tensors and buffers, which MPI may still write into if the late rank ever
// arrives), the group is marked broken, and every later op fails at once with a message naming the
// op that timed out. Receive requests of point-to-point ops are cancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
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

inline constexpr int kSpinMicroseconds = 50;  // See Note [Short spins before sleeping]
inline constexpr int kBlockedSpinMicroseconds = 3000;  // See Note [Spinning for a blocked caller]
// See Note [Small collectives start on the caller's thread].
inline constexpr size_t kStartHereBytes = size_t{64} << 10;
inline constexpr int kStartHereMicroseconds = 30;
inline constexpr int kWaitHereMicroseconds = 1000;  // See Note [A waiting caller runs its op]

class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool poll() = 0;      // true once finished (may throw ringgrad::Error)
  virtual void abandon() {}     // after a timeout: cancel what can be cancelled
  // For an op that completes on a GPU stream: enqueues a wait for it on the default stream (Note
  // [Waiting on the device] in dist/work.h). Empty for ops that complete on the host.
  virtual std::function<void()> device_wait() const { return nullptr; }
};

class CommThread : public std::enable_shared_from_this<CommThread> {
 public:
  // rank / size / backend only label error messages.
  CommThread(std::string backend, int rank, int size, double timeout_seconds, int max_poll_sleep_us, bool trace,
             SimulatedNetwork network = {});
  ~CommThread();  // runs the ops already queued (each bounded by the timeout), then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

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
  // Work::wait() calls it: when `work`'s op is next in the queue and nothing runs, runs it to its
  // end on the calling thread (Note [A waiting caller runs its op]); otherwise returns at once.
  void run_if_next(Work& work);
  // Work's waits bracket their blocking with these (Note [Spinning for a blocked caller]).
  void caller_blocks() { blocked_callers_.fetch_add(1, std::memory_order_relaxed); }
  void caller_unblocks() { blocked_callers_.fetch_sub(1, std::memory_order_relaxed); }
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
        : callable_(&f), call_([](void* c, uint64_t seq) -> std::unique_ptr<PendingOp> {
            return (*static_cast<F*>(c))(seq);
          }) {}
    std::unique_ptr<PendingOp> operator()(uint64_t seq) const { return call_(callable_, seq); }

   private:
    void* callable_;
    std::unique_ptr<PendingOp> (*call_)(void*, uint64_t);
  };
  struct Task {
    StartFn start;
    std::shared_ptr<Work> work;
    const OpInfo& info() const { return work->info(); }
  };
  struct Running {
    Task task;
    std::unique_ptr<PendingOp> op;
    Clock::time_point deadline;
    double start_us = 0;
    // On the caller's thread (Note [Small collectives start on the caller's thread]): complete()
    // then only records the end in end_us / error, and run_on_caller() does the rest.
    bool started_here = false;
    double end_us = 0;
    std::exception_ptr error;
  };
  // Under the lock: when the group is idle and `info` a small collective, takes the group for the
  // caller's thread, assigns the sequence number and returns the op's Work (moved from `info`);
  // otherwise null, and `info` is untouched.
  std::shared_ptr<Work> claim_if_idle(OpInfo& info);
  // Runs a claimed op on the caller's thread for up to kStartHereMicroseconds, then hands it over.
  void run_here(const std::shared_ptr<Work>& work, StartRef start);
  // Starts `running` (claimed: collective_active_ and starting_here_ set) on the calling thread and
  // polls it for up to `budget`, then completes it here or hands it over to this thread
  // (handed_over_). from_wait (Note [A waiting caller runs its op]): the loop yields now and then
  // and ends when another op is queued, and other threads may hold the Work; otherwise (submit)
  // the loop is tight and the Work, not yet returned, is finished without a lock.
  void run_on_caller(Running& running, StartRef start, std::chrono::microseconds budget, bool from_wait);
  std::shared_ptr<Work> enqueue(OpInfo info, StartFn start);  // for the communication thread
  void loop();
  // Starts running.task by calling `start` at `now`: false when it finished at once (failed to
  // start, or the group is broken).
  bool start(Running& running, StartRef start, Clock::time_point now);
  // Polls one running op: true once it finished (its Work is then completed). Without
  // check_deadline the timeout is not looked at (a clock read saved: see run_on_caller()).
  bool advance(Running& running, bool check_deadline = true);
  // Between polls of an op that made no progress; `sleeps` and `idle_since` carry the back-off.
  void back_off(int& sleeps, Clock::time_point idle_since) const;
  void complete(Running& running, std::exception_ptr error);
  void count(const Running& running, bool failed, double end_us);  // stats and trace; under mutex_
  bool network_delay_passed(const Running& running) const;  // Note [Simulated network]
  std::string label(const OpInfo& info) const { return describe_op(info, backend_, rank_, size_); }

  const std::string backend_;
  const int rank_, size_;
  const std::chrono::duration<double> timeout_;
  const std::chrono::microseconds max_sleep_;

  mutable std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  uint64_t next_seq_ = 0, next_p2p_seq_ = 0;
  // queue_.size() (+1 while a handed-over op waits), readable without the mutex (the idle spin).
  std::atomic<size_t> queued_{0};
  std::atomic<int> blocked_callers_{0};  // threads blocked in a Work's wait for an op of this thread
  // Under mutex_: what the thread runs, and the counters other threads read.
  bool collective_active_ = false;  // a collective (running here, or being started by a caller)
  int p2p_active_ = 0;              // that many sends / receives
  bool starting_here_ = false;      // a caller is starting a collective: start nothing meanwhile
  std::unique_ptr<Running> handed_over_;  // a caller-started collective for this thread to finish
  bool stopping_ = false;
  GroupStats stats_;
  std::vector<TraceEvent> events_;  // when trace_

  // Touched only by whoever runs ops: this thread, or a caller while starting_here_ (this thread
  // then runs nothing).
  std::string broken_;  // why the group is unusable; empty while healthy
  std::vector<std::unique_ptr<PendingOp>> abandoned_;  // See Note [After a timeout]
  std::unique_ptr<Running> collective_;                // the running collective, if any
  std::vector<std::unique_ptr<Running>> p2p_;          // running sends / receives

  const SimulatedNetwork network_;
  const bool trace_;

  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace ringgrad::dist
