// ReducerRecorder: what DistributedDataParallel observes of its steps, kept beside the Reducer
// (internal; dist/ddp/reducer.h owns one) -- the statistics (DDPStats: where each step's time
// went), the trace (compute nodes and bucket reductions on one timeline, DDPOptions::trace) and
// RINGGRAD_EXPLAIN's narration (dist/ddp/explain.h). The Reducer tells it what happens; it never
// changes what the Reducer does, so the Reducer reads as buckets and reductions alone.
//
// Note [Steps recorded once reduced]: a synchronising backward's reductions may still run when it
// returns (on nccl the GPU waits for them, not the host: Note [Waiting on the device] in
// dist/work.h), so a step is recorded only once they have all completed: at the next forward, or
// when the statistics or the trace are read (which wait for them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/trace.h"
#include "dist/ddp/explain.h"
#include "dist/ddp/options.h"
#include "dist/process_group.h"

namespace ringgrad::dist {

// A synchronising backward's reductions, recorded once they have all completed.
struct SyncedStep {
  double backward_end_us = 0, start_us = -1, host_done_us = 0;  // trace_clock_us; start_us < 0: unknown
  struct Reduction {
    std::shared_ptr<Work> work;
    int index;
    size_t bytes, parameters;
    Tensor buffer;  // a released buffer lives until its reduction completed (a device may still read it)
  };
  std::vector<Reduction> buckets;
};

class ReducerRecorder {
 public:
  // explain_steps: DDPOptions::explain_steps, raised by RINGGRAD_EXPLAIN; only rank 0 narrates.
  ReducerRecorder(const ProcessGroup& group, bool trace, int explain_steps);
  ~ReducerRecorder();
  ReducerRecorder(const ReducerRecorder&) = delete;
  ReducerRecorder& operator=(const ReducerRecorder&) = delete;

  // A forward begins: records the finished steps (raising a failed reduction's error), starts the
  // step clock, and puts backward's nodes on the trace.
  void forward_begins();
  // A synchronising backward delivered its first gradient; `bucket_lines` (one line per bucket) is
  // called only when this backward is narrated.
  template <class BucketLines>
  void synchronising_backward_begins(BucketLines bucket_lines) {
    ++synced_backwards_;
    if (explain_left_ > 0) begin_narration(bucket_lines());
  }
  // The narrator of the backward being narrated, else null.
  StepNarrator* narrator() const { return narrator_.get(); }
  // A bucket handed to the communication hook (launch_us: when, if narrated).
  void bucket_launched(int index, size_t bytes, double launch_us);
  // The synchronising backward's computation ended: its step, with the step clock's start.
  SyncedStep backward_computed();
  // Its reductions waited for (by the host, or the device): narrated, and recorded once complete.
  void synchronised_step_done(SyncedStep step);

  // Note [Steps recorded once reduced]: oldest first; without `block`, up to a running one.
  void record_finished_steps(bool block);
  const DDPStats& stats() {
    record_finished_steps(/*block=*/true);
    return stats_;
  }
  void reset_stats() {
    record_finished_steps(/*block=*/true);  // a failed reduction still raises its error
    stats_ = DDPStats{};
  }
  std::vector<TraceEvent> trace_events() {
    record_finished_steps(/*block=*/true);  // the last steps' bucket events, on nccl
    return events_;
  }
  void add_trace_event(TraceEvent e) { events_.push_back(std::move(e)); }

 private:
  void begin_narration(const std::vector<std::string>& bucket_lines);
  void record_step_times(const SyncedStep& step);

  int rank_, world_;
  std::string backend_;
  bool trace_;
  int explain_left_ = 0;      // synchronising backwards still to narrate
  int synced_backwards_ = 0;  // so far, for the narration's step number
  std::unique_ptr<StepNarrator> narrator_;
  double step_start_us_ = -1;  // the step clock (trace_clock_us); < 0: stopped
  std::vector<SyncedStep> unrecorded_;
  DDPStats stats_;
  std::vector<TraceEvent> events_;
};

}  // namespace ringgrad::dist
