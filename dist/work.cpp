#include "dist/work.h"

namespace ringgrad::dist {

void Work::wait() {
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
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
    start_us_ = start_us;
    end_us_ = end_us;
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

}  // namespace ringgrad::dist
