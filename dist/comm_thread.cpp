#include "dist/comm_thread.h"

#include <sys/prctl.h>

#include <sstream>

#include "core/error.h"

namespace ringgrad::dist {

namespace {
constexpr unsigned long kTimerSlackNs = 1000;  // See Note [Polling, not spinning]
}  // namespace

CommThread::CommThread(std::string backend, int rank, int size, double timeout_seconds, int max_poll_sleep_us,
                       bool trace, SimulatedNetwork network)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      timeout_(timeout_seconds),
      max_sleep_(max_poll_sleep_us),
      network_(network),
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
  // Abandoned ops may still be written into by MPI (See Note [After a timeout]); their memory is
  // deliberately leaked rather than freed under MPI's feet.
  for (auto& op : abandoned_) (void)op.release();
}

std::shared_ptr<Work> CommThread::claim_if_idle(OpInfo& info) {
  if (info.p2p || info.bytes > kStartHereBytes) return nullptr;
  std::lock_guard lock(mutex_);
  // Note [Small collectives start on the caller's thread].
  if (stopping_ || !queue_.empty() || collective_active_ || p2p_active_ != 0 || handed_over_) return nullptr;
  info.seq = next_seq_++;
  collective_active_ = true;
  starting_here_ = true;
  // Never queued, so no wait() can run it (Note [A waiting caller runs its op]), but a wait() after
  // a hand-over still tells this thread it blocks (Note [Spinning for a blocked caller]).
  return std::make_shared<Work>(std::move(info), backend_, rank_, size_, weak_from_this());
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

void CommThread::run_here(const std::shared_ptr<Work>& work, StartRef start) {
  Running running;  // on the stack: moved to the heap only when handed over
  running.task.work = work;
  // A tight loop: this is the caller's own core, and a yield would be a system call per poll.
  // No other thread has seen this Work yet (submit has not returned it): finished without a lock.
  run_on_caller(running, start, std::chrono::microseconds(kStartHereMicroseconds), /*from_wait=*/false);
}

void CommThread::run_if_next(Work& work) {
  std::unique_lock lock(mutex_);
  // Note [A waiting caller runs its op]: only the next op, only while nothing runs, and not with a
  // send / recv queued behind it (which would wait for it here, instead of running beside it).
  const bool next = !queue_.empty() && queue_.front().work.get() == &work && !queue_.front().info().p2p;
  if (!next || stopping_ || collective_active_ || p2p_active_ != 0 || handed_over_ || starting_here_) return;
  for (const Task& task : queue_)
    if (task.info().p2p) return;
  Running running;
  running.task = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_release);
  collective_active_ = true;
  starting_here_ = true;
  lock.unlock();
  run_on_caller(running, StartRef(running.task.start), std::chrono::microseconds(kWaitHereMicroseconds),
                /*from_wait=*/true);
}

void CommThread::run_on_caller(Running& running, StartRef start, std::chrono::microseconds budget, bool from_wait) {
  running.started_here = true;
  const size_t queued_at_start = queued_.load(std::memory_order_acquire);
  const auto began = Clock::now();
  bool finished = !this->start(running, start, began);
  // A clock read costs about as much as polling a small op on this VM, and a yield (a system call)
  // more, so the loop does both only every 16th poll; it never reads the clock for the op's
  // deadline: the budget ends long before a timeout could expire, and the communication thread
  // checks the deadline of an op it takes over. An op queued meanwhile (a send / recv from another
  // thread must not wait behind this one) ends the loop too.
  for (int polls = 1; !finished && !(finished = advance(running, /*check_deadline=*/false)); ++polls) {
    if (from_wait && queued_.load(std::memory_order_acquire) != queued_at_start) break;
    if (polls % 16 != 0) continue;
    if (Clock::now() - began >= budget) break;
    if (from_wait) std::this_thread::yield();
  }
  const double handover_us = finished ? 0 : trace_clock_us();
  std::unique_lock lock(mutex_);
  starting_here_ = false;
  if (finished) {
    collective_active_ = false;
    count(running, running.error != nullptr, running.end_us);
    // Wake the thread only if ops queued up meanwhile, or it is waiting to stop: a needless
    // wake-up takes the core from this thread (ranks are bound to one core each).
    const bool wake = !queue_.empty() || stopping_;
    lock.unlock();
    if (from_wait) running.task.work->finish(running.error, running.start_us, running.end_us);
    else running.task.work->finish_unobserved(running.error, running.start_us, running.end_us);
    if (wake) queue_cv_.notify_one();
    return;
  }
  stats_.busy_seconds += (handover_us - running.start_us) * 1e-6;  // the thread counts the rest
  running.started_here = false;
  handed_over_ = std::make_unique<Running>(std::move(running));  // the communication thread polls it from here on
  queued_.store(queue_.size() + 1, std::memory_order_release);  // ends its idle spin at once
  lock.unlock();
  queue_cv_.notify_one();
}

GroupStats CommThread::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<TraceEvent> CommThread::trace_events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

void CommThread::loop() {
  // See Note [Polling, not spinning]: without this a 1 us sleep lasts the default 50 us slack.
  prctl(PR_SET_TIMERSLACK, kTimerSlackNs, 0, 0, 0);
  int sleeps = 0;
  Clock::time_point idle_since = Clock::now();
  bool was_running = false;
  bool just_finished = false;  // an op ended in the last pass
  double last_us = trace_clock_us();
  for (;;) {
    std::vector<Task> to_start;
    bool adopted = false;
    const bool running = collective_ || !p2p_.empty();
    if (!running && just_finished) {  // See Note [Short spins before sleeping]
      const auto until = Clock::now() + std::chrono::microseconds(kSpinMicroseconds);
      while (queued_.load(std::memory_order_acquire) == 0 && Clock::now() < until) std::this_thread::yield();
    }
    {
      std::unique_lock lock(mutex_);
      auto has_work = [&] { return handed_over_ != nullptr || (!queue_.empty() && !starting_here_); };
      if (!running) queue_cv_.wait(lock, [&] { return (stopping_ && !starting_here_) || has_work(); });
      if (handed_over_) {  // started by a caller, still running: poll it as if just started
        collective_ = std::move(handed_over_);
        adopted = true;
        queued_.store(queue_.size(), std::memory_order_release);
      }
      if (!running && !collective_ && queue_.empty()) return;  // stopping, and everything queued has run
      // Point-to-point ops start whenever they reach the front; a collective only when none runs.
      while (!starting_here_ && !queue_.empty() && (queue_.front().info().p2p || !collective_active_)) {
        if (queue_.front().info().p2p) ++p2p_active_;
        else collective_active_ = true;
        to_start.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_.store(queue_.size(), std::memory_order_release);
    }
    // Busy time: the wall time during which something was running.
    const double now_us = trace_clock_us();
    if (was_running) {
      std::lock_guard lock(mutex_);
      stats_.busy_seconds += (now_us - last_us) * 1e-6;
    }
    last_us = now_us;

    bool progress = !to_start.empty() || adopted;
    int collectives_done = 0, p2p_done = 0;
    for (Task& task : to_start) {
      auto running = std::make_unique<Running>();
      const bool p2p = task.info().p2p;
      running->task = std::move(task);
      if (!start(*running, StartRef(running->task.start), Clock::now())) {
        (p2p ? p2p_done : collectives_done)++;
        continue;
      }
      if (p2p) p2p_.push_back(std::move(running));
      else collective_ = std::move(running);
    }
    if (collective_ && advance(*collective_)) {
      collective_.reset();
      ++collectives_done;
    }
    for (auto it = p2p_.begin(); it != p2p_.end();) {
      if (advance(**it)) {
        it = p2p_.erase(it);
        ++p2p_done;
      } else {
        ++it;
      }
    }
    just_finished = collectives_done + p2p_done > 0;
    if (just_finished) {
      progress = true;
      std::lock_guard lock(mutex_);
      p2p_active_ -= p2p_done;
    }
    was_running = collective_ || !p2p_.empty() || !to_start.empty();
    if (progress || !was_running) {
      sleeps = 0;
      idle_since = Clock::now();
      continue;
    }
    // See Note [Polling, not spinning].
    back_off(sleeps, idle_since);
  }
}

void CommThread::back_off(int& sleeps, Clock::time_point idle_since) const {
  // Note [Spinning for a blocked caller]
  if (blocked_callers_.load(std::memory_order_relaxed) > 0 &&
      Clock::now() - idle_since < std::chrono::microseconds(kBlockedSpinMicroseconds)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::min(max_sleep_, std::chrono::microseconds(1 << std::min(sleeps++, 16))));
  }
}

bool CommThread::start(Running& running, StartRef start, Clock::time_point now) {
  // trace_clock_us() is this clock's time in microseconds: one clock read serves both.
  running.start_us = std::chrono::duration<double, std::micro>(now.time_since_epoch()).count();
  const OpInfo& info = running.task.info();
  if (!broken_.empty()) {
    complete(running, std::make_exception_ptr(
        Error(str_cat("[dist.", info.name, "] ", label(info), ": the process group is unusable: ", broken_,
                      ". Create a new process group (every rank must), or end the job."))));
    return false;
  }
  running.deadline = now + std::chrono::duration_cast<Clock::duration>(timeout_);
  try {
    running.op = start(info.seq);
    // A modelled network delays the op's completion on the host only (Note [Simulated network]), so
    // with one the device must not be let past the op early: the Work is then waited for on the host.
    const bool network_modelled = network_.latency_us > 0 || network_.bandwidth_gbps > 0;
    if (auto enqueue_wait = running.op->device_wait(); enqueue_wait && !network_modelled)
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
    if (running.op->poll() && network_delay_passed(running)) {
      complete(running, nullptr);
      return true;
    }
    if (!check_deadline || Clock::now() < running.deadline) return false;
    running.op->abandon();
    abandoned_.push_back(std::move(running.op));
    broken_ = str_cat(info.name, " #", info.seq, " timed out");
    const char* hint = info.p2p
        ? "The peer probably did not issue the matching send / recv (same tag, same byte count)."
        : "Another rank probably did not issue this collective, or issued collectives in a different order (see "
          "Note [Collective order] in dist/process_group.h; RINGGRAD_DIST_DEBUG=1 checks it on every "
          "collective), or died.";
    complete(running, std::make_exception_ptr(Error(str_cat("[dist.", info.name, "] ", label(info), " timed out after ",
                                                            timeout_.count(), " s. ", hint,
                                                            " If it is only slow, raise RINGGRAD_COLLECTIVE_TIMEOUT "
                                                            "(seconds)."))));
  } catch (const Error& e) {
    running.op->abandon();
    abandoned_.push_back(std::move(running.op));
    broken_ = str_cat(info.name, " #", info.seq, " failed");
    complete(running, std::make_exception_ptr(Error(str_cat(e.what(), " [while running ", label(info), "]"))));
  } catch (...) {
    broken_ = str_cat(info.name, " #", info.seq, " failed");
    complete(running, std::current_exception());
  }
  return true;
}

// Note [Simulated network]: the op's data has arrived; with a modelled network it counts as done
// only once latency + bytes / bandwidth has passed since it started.
bool CommThread::network_delay_passed(const Running& running) const {
  if (network_.latency_us <= 0 && network_.bandwidth_gbps <= 0) return true;
  double modelled_us = network_.latency_us;
  if (network_.bandwidth_gbps > 0) modelled_us += static_cast<double>(running.task.info().bytes) / (network_.bandwidth_gbps * 1e3);
  return trace_clock_us() >= running.start_us + modelled_us;
}

void CommThread::complete(Running& running, std::exception_ptr error) {
  const double end_us = trace_clock_us();
  if (running.started_here) {  // run_here() counts it and finishes its Work, under one lock
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
    if (!running.task.info().p2p) collective_active_ = false;
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
