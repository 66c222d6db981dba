#include "dist/comm_thread.h"

#include <sys/prctl.h>

#include <sstream>

#include "core/error.h"
#include "core/profiler.h"
#include "dist/kept_until_exit.h"

namespace ringgrad::dist {

namespace {
constexpr unsigned long kTimerSlackNs = 1000;  // See Note [Polling, not spinning]
}  // namespace

CommThread::CommThread(std::string backend, int rank, int size, double timeout_seconds, int max_poll_sleep_us,
                       bool trace)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      timeout_(timeout_seconds),
      max_sleep_(max_poll_sleep_us),
      trace_(trace),
      thread_([this] { loop(); }) {}

CommThread::~CommThread() { shutdown(); }

void CommThread::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Abandoned ops may still be written into by MPI (See Note [After a timeout]): parked until exit
  // rather than freed under MPI's feet.
  for (auto& op : abandoned_) detail::keep_until_exit(std::shared_ptr<PendingOp>(std::move(op)));
  abandoned_.clear();
}

std::shared_ptr<Work> CommThread::enqueue(OpInfo info, StartFn start) {
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(mutex_);
    RG_CHECK(!stopping_, "dist." + info.name, "the process group is shutting down");
    info.seq = info.p2p ? next_p2p_seq_++ : next_seq_++;
    work = std::make_shared<Work>(std::move(info), backend_, rank_, size_, weak_from_this());
    queue_.push_back(Task{std::move(start), work});
    queued_.store(queue_.size(), std::memory_order_release);
  }
  queue_cv_.notify_one();
  return work;
}

GroupStats CommThread::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<TraceEvent> CommThread::trace_events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

// ---- Ops on a caller's thread ---------------------------------------------------------------------

// Note [Small collectives start on the caller's thread]: handing an op to the communication thread
// and its completion back costs two thread wake-ups, several times the wire time of a small
// AllReduce. So when the group is idle (nothing running, queued or handed over) a collective of at
// most kStartHereBytes is started by the submitting thread itself, which polls it for up to
// kStartHereMicroseconds. When the peers are there too (a synchronous loop), it completes before
// submit() returns, with no other thread involved. Otherwise it is handed over (handed_over_) and
// the communication thread finishes it: the caller loses at most those microseconds, and its
// computation still overlaps the rest. Order is kept: the op holds the group's one collective slot
// (collectives_active_), so an op submitted meanwhile queues behind it, and while a caller runs an op
// (starting_here_) the communication thread starts nothing -- one thread runs ops at a time.
namespace {
constexpr size_t kStartHereBytes = size_t{64} << 10;
constexpr int kStartHereMicroseconds = 30;
}  // namespace

std::shared_ptr<Work> CommThread::claim_if_idle(OpInfo& info) {
  if (info.p2p || info.bytes > kStartHereBytes) return nullptr;
  std::lock_guard lock(mutex_);
  if (stopping_ || !queue_.empty() || collectives_active_ != 0 || p2p_active_ != 0 || handed_over_) return nullptr;
  info.seq = next_seq_++;
  ++collectives_active_;
  starting_here_ = true;
  // Never queued, so no wait() can run it (Note [A waiting caller runs its op]), but a wait() after
  // a hand-over still tells this thread it blocks (Note [Spinning for a blocked caller]).
  return std::make_shared<Work>(std::move(info), backend_, rank_, size_, weak_from_this());
}

void CommThread::run_here(const std::shared_ptr<Work>& work, StartRef start) {
  Running running;  // on the stack: moved to the heap only when handed over
  running.task.work = work;
  // A tight loop: this is the caller's own core, and a yield would be a system call per poll.
  // No other thread has seen this Work yet (submit has not returned it): finished without a lock.
  run_on_caller(running, start, std::chrono::microseconds(kStartHereMicroseconds), /*from_wait=*/false);
}

// Note [A waiting caller runs its op]: a caller that submits a collective and waits for it at once
// (a blocking loop, such as allreduce_bench's) would pay two thread hand-offs, and the thread's
// sleeps between polls on top. So wait() on an op that is next in the queue, with nothing running
// and no send / recv queued, takes it out of the queue and runs it on the waiting thread, which has
// nothing else to do. That thread polls with a yield every 16th poll (the core stays free for other
// processes' threads), for up to kWaitHereMicroseconds or until another op is queued, then hands
// the op over as in Note [Small collectives start on the caller's thread], under the same ordering
// rules (starting_here_). Both bounds matter beyond cost: the waiting thread never checks the op's
// deadline (the communication thread does, once it has the op), and a send / recv queued meanwhile
// must not wait behind a collective that may not finish until it has run. wait(timeout) and
// wait_on_device() do not do this: they must not run an op longer than asked, or block the host
// for a device's op.
namespace {
constexpr int kWaitHereMicroseconds = 1000;
}  // namespace

void CommThread::run_if_next(Work& work) {
  std::unique_lock lock(mutex_);
  const bool next = !queue_.empty() && queue_.front().work.get() == &work && !queue_.front().info().p2p;
  if (!next || stopping_ || collectives_active_ != 0 || p2p_active_ != 0 || handed_over_ || starting_here_) return;
  for (const Task& task : queue_)
    if (task.info().p2p) return;
  Running running;
  running.task = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_release);
  ++collectives_active_;
  starting_here_ = true;
  lock.unlock();
  run_on_caller(running, StartRef(running.task.start), std::chrono::microseconds(kWaitHereMicroseconds),
                /*from_wait=*/true);
}

void CommThread::run_on_caller(Running& running, StartRef start, std::chrono::microseconds budget, bool from_wait) {
  running.started_here = true;
  const bool finished = poll_on_caller(running, start, budget, from_wait);
  const double handover_us = finished ? 0 : trace_clock_us();
  std::unique_lock lock(mutex_);
  starting_here_ = false;
  if (finished) end_on_caller(lock, running, from_wait);
  else hand_over(lock, running, handover_us);
}

// Starts the op and polls it until it finishes (true) or the caller's turn is over (false). A clock
// read costs about as much as polling a small op, and a yield (a system call) more, so the loop does
// both only every 16th poll. It never reads the clock for the op's deadline: the budget ends long
// before a timeout could expire, and the communication thread checks the deadline of an op it takes
// over.
bool CommThread::poll_on_caller(Running& running, StartRef start, std::chrono::microseconds budget, bool from_wait) {
  const size_t queued_at_start = queued_.load(std::memory_order_acquire);
  const auto began = Clock::now();
  if (!this->start(running, start, began)) return true;  // failed to start: finished
  for (int polls = 1;; ++polls) {
    if (advance(running, /*check_deadline=*/false)) return true;
    if (from_wait && queued_.load(std::memory_order_acquire) != queued_at_start) return false;
    if (polls % 16 != 0) continue;
    if (Clock::now() - began >= budget) return false;
    if (from_wait) std::this_thread::yield();
  }
}

// The op finished on the caller's thread: its counters and the group's flags are updated under the
// lock the caller holds, then its Work is finished (without the Work's lock when submit() has not
// returned it yet).
void CommThread::end_on_caller(std::unique_lock<std::mutex>& lock, Running& running, bool from_wait) {
  --collectives_active_;
  count(running, running.error != nullptr, running.end_us);
  // Wake the thread only if ops queued up meanwhile, or it is waiting to stop: a needless wake-up
  // takes the core from this thread (ranks are bound to one core each).
  const bool wake = !queue_.empty() || stopping_;
  lock.unlock();
  if (from_wait) running.task.work->finish(running.error, running.start_us, running.end_us);
  else running.task.work->finish_unobserved(running.error, running.start_us, running.end_us);
  if (wake) queue_cv_.notify_one();
}

// The op is still running: the caller counts its busy time so far, and the communication thread
// polls it from here on (and counts the rest).
void CommThread::hand_over(std::unique_lock<std::mutex>& lock, Running& running, double handover_us) {
  stats_.busy_seconds += (handover_us - running.start_us) * 1e-6;
  running.started_here = false;
  handed_over_ = std::make_unique<Running>(std::move(running));
  queued_.store(queue_.size() + 1, std::memory_order_release);  // ends the thread's idle spin at once
  lock.unlock();
  queue_cv_.notify_one();
}

// ---- The communication thread ---------------------------------------------------------------------

// Note [Short spins before sleeping]: a small collective takes a few microseconds on the wire, and
// waking a sleeping thread costs about as much again. So after an op of its own ended, with nothing
// left running, the thread watches its queue (queued_, without the lock) for up to
// kSpinMicroseconds, yielding the core between looks, before it sleeps on queue_cv_: back-to-back
// collectives skip the wake-up, while an idle group costs nothing. Only after an op of its own:
// woken for an op that a caller took meanwhile (Note [A waiting caller runs its op]), the thread
// goes back to sleep at once rather than take turns on the core with that caller's polls. (A caller
// blocked on a Work does not spin: it sleeps on the Work's condition variable. Where threads
// outnumber cores, its spinning would slow the communication threads it waits for.)
//
// Note [Spinning for a blocked caller]: the sleeps of Note [Polling, not spinning] keep this thread
// off the core while the rank's compute thread needs it. Once that thread blocks in wait() or
// wait_on_device() for an op that runs here, the core has nothing else to do, and a sleep only
// delays the op -- and the peers: in DDP the rank that finished its backward first waits for the
// other's last bucket, and, asleep, it notices the other's arrival up to a sleep late, time the
// other rank (the one the step waits for) spends waiting for its share of the reduction (Note
// [Shared gradient buffers]). So while a caller is blocked (blocked_callers_, which Work's waits
// count) the thread yields between polls instead of sleeping, for up to kBlockedSpinMicroseconds
// without progress. A yield still lets any other runnable thread on the core go first; beyond that
// bound -- a peer that is very late or never comes -- the thread sleeps again.
namespace {
constexpr int kSpinMicroseconds = 50;
constexpr int kBlockedSpinMicroseconds = 3000;
}  // namespace

// Each pass: take what may start from the queue (or wait there when nothing runs), start it, poll
// everything running once, then wait a little if nothing progressed. A collective is taken only
// when none runs (or every running one is ordered on the device, Note [Collectives ordered on the
// device]), one per pass, so they start in order; sends / receives whenever they reach the front
// of the queue.
void CommThread::loop() {
  prctl(PR_SET_TIMERSLACK, kTimerSlackNs, 0, 0, 0);   // Note [Polling, not spinning]
  profiler::PhaseGuard phase(profiler::Phase::comm);  // the ops a collective calls here (casts, sums)
  int sleeps = 0;                                     // the back-off (back_off())
  Clock::time_point idle_since = Clock::now();
  bool was_running = false;    // something ran in the last pass: it counts as busy time
  bool just_finished = false;  // an op ended in the last pass
  double last_us = trace_clock_us();
  for (;;) {
    const bool running = !collectives_.empty() || !p2p_.empty();
    if (!running && just_finished) spin_for_next_op();
    Pass pass;
    if (!take_ops(running, pass)) return;  // stopping, and everything queued has run
    count_busy_time(was_running, last_us);
    start_taken(pass);
    poll_running(pass);
    just_finished = pass.collectives_done + pass.p2p_done > 0;
    if (just_finished) end_p2p(pass.p2p_done);
    const bool progress = !pass.to_start.empty() || pass.adopted || just_finished;
    was_running = !collectives_.empty() || !p2p_.empty() || !pass.to_start.empty();
    if (progress || !was_running) {
      sleeps = 0;
      idle_since = Clock::now();
    } else {
      back_off(sleeps, idle_since);
    }
  }
}

// Note [Short spins before sleeping].
void CommThread::spin_for_next_op() const {
  const auto until = Clock::now() + std::chrono::microseconds(kSpinMicroseconds);
  while (queued_.load(std::memory_order_acquire) == 0 && Clock::now() < until) std::this_thread::yield();
}

// When nothing runs, waits for a queued op that may start, a handed-over one, or the end. Then
// adopts a handed-over op and takes the ops that may start now.
bool CommThread::take_ops(bool running, Pass& pass) {
  std::unique_lock lock(mutex_);
  if (!running) {
    queue_cv_.wait(lock, [&] {
      return (stopping_ && !starting_here_) || handed_over_ != nullptr || (!queue_.empty() && !starting_here_);
    });
  }
  if (handed_over_) {  // started by a caller, still running: poll it as if just started
    collectives_.push_back(std::move(handed_over_));
    pass.adopted = true;
    queued_.store(queue_.size(), std::memory_order_release);
  }
  if (!running && collectives_.empty() && queue_.empty()) return false;
  // Point-to-point ops start whenever they reach the front; a collective only when may_start_collective(),
  // and one per pass: whether the next may follow it depends on the op its start returns.
  bool took_collective = false;
  while (!starting_here_ && !queue_.empty() &&
         (queue_.front().info().p2p || (!took_collective && may_start_collective()))) {
    if (queue_.front().info().p2p) {
      ++p2p_active_;
    } else {
      ++collectives_active_;
      took_collective = true;
    }
    pass.to_start.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  queued_.store(queue_.size(), std::memory_order_release);
  return true;
}

// Busy time: the wall time during which something was running, counted from pass to pass.
void CommThread::count_busy_time(bool was_running, double& last_us) {
  const double now_us = trace_clock_us();
  if (was_running) {
    std::lock_guard lock(mutex_);
    stats_.busy_seconds += (now_us - last_us) * 1e-6;
  }
  last_us = now_us;
}

void CommThread::start_taken(Pass& pass) {
  for (Task& task : pass.to_start) {
    auto running = std::make_unique<Running>();
    const bool p2p = task.info().p2p;
    running->task = std::move(task);
    if (!start(*running, StartRef(running->task.start), Clock::now())) {
      (p2p ? pass.p2p_done : pass.collectives_done)++;
      continue;
    }
    if (p2p) p2p_.push_back(std::move(running));
    else collectives_.push_back(std::move(running));
  }
}

// Note [Collectives ordered on the device]: the nccl backend's start only enqueues the reduction on
// the group's communication stream, which runs what it is given in order. Waiting on the host for
// one to finish before enqueuing the next -- DDP's buckets, one after another -- would leave the
// stream idle for a round trip of the host between them (an event query, a sleep, a wake-up), and
// the next bucket's reduction would start that much later. So while every running collective is
// ordered_on_device(), this thread starts the next one at once, and several are in flight. They
// still finish in submission order: only the oldest is polled (its deadline checked), a later one
// only once the oldest has finished -- also when the later one completes on the host (a barrier
// started behind NCCL ops waits with its Work until theirs are done). An op that does not say it is
// ordered on the device keeps the old rule: nothing starts after it before it has finished. When
// the oldest fails or times out, the group is broken (Note [After a timeout]) and the collectives
// behind it fail with it.
bool CommThread::may_start_collective() const {
  if (collectives_active_ == 0) return true;
  // Only this thread's own running collectives: not one a caller is starting or has handed over.
  if (static_cast<size_t>(collectives_active_) != collectives_.size()) return false;
  for (const auto& running : collectives_)
    if (!running->op->ordered_on_device()) return false;
  return true;
}

void CommThread::poll_running(Pass& pass) {
  while (!collectives_.empty()) {
    const bool healthy = broken_.empty();
    if (!advance(*collectives_.front())) break;
    collectives_.pop_front();
    ++pass.collectives_done;
    if (healthy && !broken_.empty()) fail_behind(pass);
  }
  for (auto it = p2p_.begin(); it != p2p_.end();) {
    if (advance(**it)) {
      it = p2p_.erase(it);
      ++pass.p2p_done;
    } else {
      ++it;
    }
  }
}

// The oldest running collective failed or timed out, and the group is broken: the ones launched
// behind it cannot complete (NCCL's communicator is aborted), so they fail too, naming the cause.
void CommThread::fail_behind(Pass& pass) {
  for (auto& running : collectives_) {
    abandon(*running);
    const OpInfo& info = running->task.info();
    complete(*running, std::make_exception_ptr(Error(str_cat("[dist.", info.name, "] ", label(info),
                                                             ": the process group is unusable: ", broken_,
                                                             " while this op was in flight behind it. Create a new "
                                                             "process group (every rank must), or end the job."))));
    ++pass.collectives_done;
  }
  collectives_.clear();
}

// After a pass in which ops ended: the sends / receives among them no longer count as active.
void CommThread::end_p2p(int done) {
  std::lock_guard lock(mutex_);
  p2p_active_ -= done;
}

// Note [Polling, not spinning] and Note [Spinning for a blocked caller].
void CommThread::back_off(int& sleeps, Clock::time_point idle_since) const {
  if (blocked_callers_.load(std::memory_order_relaxed) > 0 &&
      Clock::now() - idle_since < std::chrono::microseconds(kBlockedSpinMicroseconds)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::min(max_sleep_, std::chrono::microseconds(1 << std::min(sleeps++, 16))));
  }
}

// ---- One op, on whichever thread runs it ----------------------------------------------------------

bool CommThread::start(Running& running, StartRef start, Clock::time_point now) {
  // trace_clock_us() is this clock's time in microseconds: one clock read serves both.
  running.start_us = std::chrono::duration<double, std::micro>(now.time_since_epoch()).count();
  const OpInfo& info = running.task.info();
  if (!broken_.empty()) {
    complete(running, std::make_exception_ptr(Error(
                          str_cat("[dist.", info.name, "] ", label(info), ": the process group is unusable: ", broken_,
                                  ". Create a new process group (every rank must), or end the job."))));
    return false;
  }
  running.deadline = now + std::chrono::duration_cast<Clock::duration>(timeout_);
  try {
    running.op = start(info.seq);
    if (auto enqueue_wait = running.op->device_wait(); enqueue_wait)
      running.task.work->set_device_wait(std::move(enqueue_wait));
    return true;
  } catch (const Error& e) {
    broken_ = str_cat(info.name, " #", info.seq, " failed");
    complete(running, std::make_exception_ptr(Error(str_cat(e.what(), " [while starting ", label(info), "]"))));
  } catch (...) {
    broken_ = str_cat(info.name, " #", info.seq, " failed");
    complete(running, std::current_exception());
  }
  return false;
}

bool CommThread::advance(Running& running, bool check_deadline) {
  const OpInfo& info = running.task.info();
  try {
    if (running.op->poll()) {
      complete(running, nullptr);
      return true;
    }
    if (!check_deadline || Clock::now() < running.deadline) return false;
    time_out(running);
  } catch (const Error& e) {
    abandon(running);
    broken_ = str_cat(info.name, " #", info.seq, " failed");
    complete(running, std::make_exception_ptr(Error(str_cat(e.what(), " [while running ", label(info), "]"))));
  } catch (...) {
    broken_ = str_cat(info.name, " #", info.seq, " failed");
    complete(running, std::current_exception());
  }
  return true;
}

void CommThread::time_out(Running& running) {
  const OpInfo& info = running.task.info();
  abandon(running);
  broken_ = str_cat(info.name, " #", info.seq, " timed out");
  const char* hint =
      info.p2p ? "The peer probably did not issue the matching send / recv (same tag, same byte count)."
               : "Another rank probably did not issue this collective, or issued collectives in a different order (see "
                 "Note [Collective order] in dist/process_group.h; RINGGRAD_DIST_DEBUG=1 checks it on every "
                 "collective), or died.";
  std::string peers;
  if (peer_report_) {
    try {
      peers = peer_report_();
    } catch (...) {
      // The diagnosis is a courtesy: the timeout is reported without it.
    }
  }
  complete(running,
           std::make_exception_ptr(Error(str_cat("[dist.", info.name, "] ", label(info), " timed out after ",
                                                 timeout_.count(), " s. ", peers.empty() ? "" : peers + " ", hint,
                                                 " If it is only slow, raise RINGGRAD_COLLECTIVE_TIMEOUT "
                                                 "(seconds)."))));
}

void CommThread::abandon(Running& running) {
  running.op->abandon();
  abandoned_.push_back(std::move(running.op));
}

void CommThread::complete(Running& running, std::exception_ptr error) {
  const double end_us = trace_clock_us();
  if (running.started_here) {  // end_on_caller() counts it and finishes its Work, under one lock
    running.end_us = end_us;
    running.error = std::move(error);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    count(running, error != nullptr, end_us);
    // The group counts as idle before the waiter wakes: its next collective may then start on its
    // own thread (Note [Small collectives start on the caller's thread]) instead of queueing behind
    // a flag this thread has not cleared yet.
    if (!running.task.info().p2p) --collectives_active_;
  }
  running.task.work->finish(error, running.start_us, end_us);
}

void CommThread::count(const Running& running, bool failed, double end_us) {
  const OpInfo& info = running.task.info();
  ++stats_.ops;
  if (failed) ++stats_.failed;
  if (running.started_here) stats_.busy_seconds += (end_us - running.start_us) * 1e-6;
  stats_.bytes += info.bytes;
  if (trace_) {
    events_.push_back(TraceEvent{str_cat(info.name, " #", info.seq), "comm", rank_, "comm:" + backend_,
                                 running.start_us, end_us - running.start_us,
                                 str_cat("\"bytes\": ", info.bytes, ", \"ok\": ", failed ? "false" : "true")});
  }
}

}  // namespace ringgrad::dist
