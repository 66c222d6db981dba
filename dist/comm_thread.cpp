#include "dist/comm_thread.h"

#include <sstream>

#include "core/error.h"

namespace ringgrad::dist {

CommThread::CommThread(std::string backend, int rank, int size, double timeout_seconds, int max_poll_sleep_us)
    : backend_(std::move(backend)),
      rank_(rank),
      size_(size),
      timeout_(timeout_seconds),
      max_sleep_(max_poll_sleep_us),
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

std::string CommThread::label(const OpInfo& info) const {
  return str_cat(info.name, " #", info.seq, " (", info.detail, ", ", info.bytes, " bytes) on backend '",
                 backend_, "', rank ", rank_, "/", size_);
}

std::shared_ptr<Work> CommThread::submit(OpInfo info, StartFn start) {
  std::shared_ptr<Work> work;
  {
    std::lock_guard lock(mutex_);
    RG_CHECK(!stopping_, "dist." + info.name, "the process group is shutting down");
    info.seq = next_seq_++;
    work = std::make_shared<Work>(label(info));
    queue_.push_back(Task{std::move(info), std::move(start), work});
  }
  queue_cv_.notify_one();
  return work;
}

void CommThread::loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run(task);
  }
}

void CommThread::run(Task& task) {
  const std::string op = "dist." + task.info.name;
  if (!broken_.empty()) {
    task.work->finish(std::make_exception_ptr(
        Error(str_cat("[", op, "] ", label(task.info), ": the process group is unusable: ", broken_,
                      ". Create a new process group (every rank must), or end the job."))));
    return;
  }
  using Clock = std::chrono::steady_clock;
  std::unique_ptr<PendingOp> pending;
  try {
    pending = task.start(task.info.seq);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout_);
    // See Note [Polling, not spinning].
    int idle_polls = 0;
    while (!pending->poll()) {
      if (Clock::now() >= deadline) {
        pending->abandon();
        abandoned_.push_back(std::move(pending));
        broken_ = str_cat(task.info.name, " #", task.info.seq, " timed out");
        task.work->finish(std::make_exception_ptr(Error(str_cat(
            "[", op, "] ", label(task.info), " timed out after ", timeout_.count(),
            " s. Another rank probably did not issue this collective, or issued collectives in a different "
            "order (see Note [Collective order] in dist/process_group.h). If it is only slow, raise "
            "RINGGRAD_COLLECTIVE_TIMEOUT (seconds)."))));
        return;
      }
      if (++idle_polls <= 32) {
        std::this_thread::yield();
      } else {
        const auto sleep = std::min(max_sleep_, std::chrono::microseconds(1 << std::min(idle_polls - 32, 16)));
        std::this_thread::sleep_for(sleep);
      }
    }
  } catch (const Error& e) {
    if (pending) {
      pending->abandon();
      abandoned_.push_back(std::move(pending));
    }
    broken_ = str_cat(task.info.name, " #", task.info.seq, " failed");
    task.work->finish(std::make_exception_ptr(Error(str_cat(e.what(), " [while running ", label(task.info), "]"))));
    return;
  } catch (...) {
    broken_ = str_cat(task.info.name, " #", task.info.seq, " failed");
    task.work->finish(std::current_exception());
    return;
  }
  task.work->finish();
}

}  // namespace ringgrad::dist
