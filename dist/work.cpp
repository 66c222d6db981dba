#include "dist/work.h"

#include "core/error.h"

namespace ringgrad::dist {

std::string describe_op(const OpInfo& info, const std::string& backend, int rank, int size) {
  return str_cat(info.name, " #", info.seq, " (", info.detail ? info.detail(info.operands) : std::string(), ", ",
                 info.bytes, " bytes) on backend '", backend, "', rank ", rank, "/", size);
}

namespace {
// Tells the op's communication thread that a caller is blocked on it while in scope (Note
// [Spinning for a blocked caller] in dist/comm_thread.cpp). No runner: nothing to tell.
class BlockedCaller {
 public:
  explicit BlockedCaller(WorkRunner* runner) : runner_(runner) {
    if (runner_) runner_->caller_blocks();
  }
  ~BlockedCaller() {
    if (runner_) runner_->caller_unblocks();
  }
  BlockedCaller(const BlockedCaller&) = delete;
  BlockedCaller& operator=(const BlockedCaller&) = delete;

 private:
  WorkRunner* runner_;
};
}  // namespace

void Work::wait() {
  if (!finished_.load(std::memory_order_acquire)) {
    // Note [A waiting caller runs its op] (in dist/comm_thread.cpp). No runner: the group is gone.
    std::shared_ptr<WorkRunner> runner = runner_.lock();
    if (runner) runner->run_if_next(*this);
    BlockedCaller blocked(runner.get());
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
}

void Work::wait_on_device() {
  std::function<void()> enqueue_wait;
  {
    const std::shared_ptr<WorkRunner> runner = runner_.lock();
    BlockedCaller blocked(runner.get());
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return done_ || device_wait_ != nullptr; });
    if (done_) {
      if (error_) std::rethrow_exception(error_);
      return;  // finished: nothing left for the device to wait for
    }
    enqueue_wait = device_wait_;
  }
  enqueue_wait();
}

void Work::set_device_wait(std::function<void()> enqueue_wait) {
  {
    std::lock_guard lock(mutex_);
    device_wait_ = std::move(enqueue_wait);
  }
  done_cv_.notify_all();
}

bool Work::wait(std::chrono::duration<double> timeout) {
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool Work::is_completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard lock(mutex_);
  return done_ && !error_;
}

std::exception_ptr Work::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

double Work::start_us() const {
  std::lock_guard lock(mutex_);
  return start_us_;
}

double Work::end_us() const {
  std::lock_guard lock(mutex_);
  return end_us_;
}

void Work::finish(std::exception_ptr error, double start_us, double end_us) {
  {
    std::lock_guard lock(mutex_);
    finish_unobserved(std::move(error), start_us, end_us);  // the same stores, under the lock
  }
  done_cv_.notify_all();
}

void Work::finish_unobserved(std::exception_ptr error, double start_us, double end_us) {
  start_us_ = start_us;
  end_us_ = end_us;
  done_ = true;
  error_ = std::move(error);
  finished_.store(true, std::memory_order_release);
}

}  // namespace ringgrad::dist
