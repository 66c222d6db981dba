#include "dist/ddp/recorder.h"

#include <algorithm>
#include <utility>

#include "autograd/engine.h"
#include "core/env.h"

namespace ringgrad::dist {

namespace {
constexpr size_t kMaxTraceEvents = 1 << 20;  // a long run must not grow without bound
}  // namespace

ReducerRecorder::ReducerRecorder(const ProcessGroup& group, bool trace, int explain_steps)
    : rank_(group.rank()), world_(group.size()), backend_(group.backend()), trace_(trace) {
  const auto explain = env::integer("RINGGRAD_EXPLAIN", "dist.DistributedDataParallel", 0, 1000000);
  explain_left_ = std::max<int>(explain_steps, static_cast<int>(explain.value_or(0)));
  if (rank_ != 0) explain_left_ = 0;  // rank 0 speaks for the ranks: they run the same step
}

ReducerRecorder::~ReducerRecorder() {
  if (trace_) autograd::set_node_observer(nullptr);
}

void ReducerRecorder::forward_begins() {
  record_finished_steps(/*block=*/false);  // also raises a device-waited reduction's failure
  if (step_start_us_ < 0) step_start_us_ = trace_clock_us();
  if (trace_) {
    autograd::set_node_observer([this](const std::string& name, double start_us, double end_us) {
      if (events_.size() < kMaxTraceEvents)
        events_.push_back(TraceEvent{name, "compute", rank_, "compute", start_us, end_us - start_us, ""});
    });
  }
}

void ReducerRecorder::begin_narration(const std::vector<std::string>& bucket_lines) {
  narrator_ = std::make_unique<StepNarrator>(rank_, world_, synced_backwards_);
  narrator_->begin(bucket_lines);
}

void ReducerRecorder::bucket_launched(int index, size_t bytes, double launch_us) {
  if (narrator_) narrator_->bucket_launched(index, bytes, launch_us);
  ++stats_.bucket_reductions;
  stats_.bytes_reduced += static_cast<int64_t>(bytes);
}

SyncedStep ReducerRecorder::backward_computed() {
  SyncedStep step;
  step.backward_end_us = trace_clock_us();
  step.start_us = step_start_us_;
  step_start_us_ = -1;
  return step;
}

void ReducerRecorder::synchronised_step_done(SyncedStep step) {
  step.host_done_us = trace_clock_us();
  if (narrator_) {
    for (const auto& r : step.buckets)
      if (r.work->is_completed()) narrator_->reduced(r.index, r.work->start_us(), r.work->end_us());
    narrator_->done((step.host_done_us - step.backward_end_us) * 1e-3);
    narrator_.reset();
    --explain_left_;
  }
  unrecorded_.push_back(std::move(step));
  record_finished_steps(/*block=*/false);
}

void ReducerRecorder::record_finished_steps(bool block) {
  while (!unrecorded_.empty()) {
    const SyncedStep& step = unrecorded_.front();
    for (const auto& b : step.buckets) {
      if (!block && !b.work->is_completed()) return;  // a GPU reduction still running: later
      try {
        b.work->wait();  // completed (or now waited for); rethrows a device-waited op's failure
      } catch (...) {
        unrecorded_.erase(unrecorded_.begin());  // raised once, not again by every later call
        throw;
      }
    }
    record_step_times(step);
    unrecorded_.erase(unrecorded_.begin());
  }
}

void ReducerRecorder::record_step_times(const SyncedStep& step) {
  DDPStepTimes t;
  double done_us = step.host_done_us;  // the host waited this long (all of it on the MPI backends)
  for (const auto& b : step.buckets) {
    const double start = b.work->start_us(), end = b.work->end_us();
    done_us = std::max(done_us, end);  // a device-waited reduction may end after the host moved on
    t.comm_ms += (end - start) * 1e-3;
    if (trace_ && events_.size() < kMaxTraceEvents)
      events_.push_back(
          TraceEvent{str_cat("bucket ", b.index), "comm", rank_, "comm:" + backend_, start, end - start,
                     str_cat("\"bucket\": ", b.index, ", \"bytes\": ", b.bytes, ", \"parameters\": ", b.parameters)});
  }
  const double backward_end_us = step.backward_end_us;
  t.compute_ms = step.start_us >= 0 ? (backward_end_us - step.start_us) * 1e-3 : 0;
  t.exposed_comm_ms = (done_us - backward_end_us) * 1e-3;
  if (trace_ && events_.size() < kMaxTraceEvents)
    events_.push_back(
        TraceEvent{"wait for buckets", "compute", rank_, "compute", backward_end_us, done_us - backward_end_us, ""});
  stats_.last = t;
  stats_.total.compute_ms += t.compute_ms;
  stats_.total.comm_ms += t.comm_ms;
  stats_.total.exposed_comm_ms += t.exposed_comm_ms;
  ++stats_.steps;
}

}  // namespace ringgrad::dist
