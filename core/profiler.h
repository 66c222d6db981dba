// A per-op profiler, in the manner of torch.profiler's key_averages() table: which op ate the step.
//
//   profiler::enable({.trace_events = true});
//   ... training steps ...
//   profiler::disable();
//   std::printf("%s", profiler::format_table(profiler::op_table(), steps).c_str());
//
// Every op front end of core/native records itself with an OpScope: its name, and what it moved or
// computed -- FLOPs for the GEMM-shaped ops (mm, bmm, conv2d, attention), bytes read and written for
// the memory-bound ones (elementwise, reductions, norms, softmax, copies). The backward engine
// records each node (`node:mm`, `node:AccumulateGrad`, ...) around the ops its formula calls, and
// Optimizer::step the update (`SGD.step`), so a row's self time is its total minus the ops it called: the cost of the op itself.
// Rows are kept apart by phase -- forward, backward (inside autograd's backward), optimizer, and the
// ops of the threads beside training: a communication thread's (comm) and a DataLoader's prefetching
// worker's (data) -- since one op (mm) has different shapes and costs in each.
//
// Times are the host's wall clock around each front end. On a CUDA device an op's kernels run
// asynchronously, so its row measures the launch, not the kernel: the profiler does not synchronise
// and has no CUPTI (Nsight Systems times the kernels). The table is for the CPU backend's ops.
//
// Off, an OpScope costs its arguments (a few multiplications of sizes for the FLOP or byte count)
// and one relaxed atomic load with a branch not taken (bench/profiler_overhead measures both against
// a training step). An op that throws is not recorded. On, each op costs two clock reads and a locked map update,
// about a microsecond: the table is for finding the expensive ops, not for timing the cheap ones.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"

namespace ringgrad::profiler {

enum class Phase { forward, backward, optimizer, comm, data };
const char* phase_name(Phase phase);

struct Options {
  bool trace_events = false;  // also keep one TraceEvent per op (trace_events()), for a Chrome trace
};

namespace detail {
extern std::atomic<bool> g_enabled;
}

// Whether ops record themselves now.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// Starts (or resumes) recording. What was recorded before is kept: reset() clears it.
void enable(Options options = {});
// Stops recording; the table and the events stay until reset().
void disable();
// Forgets every row, event and the recorded wall time.
void reset();

// One row of the table: an op in one phase, summed over its calls.
struct OpStats {
  std::string name;
  Phase phase = Phase::forward;
  int64_t calls = 0;
  double total_us = 0;  // wall time from the op's start to its end, children included
  double self_us = 0;   // total minus the recorded ops it called
  double flops = 0;     // floating-point operations the op's formula does (0: not counted)
  double bytes = 0;     // bytes read and written, for the memory-bound ops (0: not counted)
};

// Every row, by self time, largest first.
std::vector<OpStats> op_table();
// Microseconds spent with recording on (between enable and disable calls): the table's 100%.
double recorded_wall_us();

// The table as text: phase, op, calls, total and self ms, self as a share of the recorded wall time,
// GFLOP/s and GB/s over the op's total time where it counts them; `max_rows` rows (0: all), then a
// line with what the rest and the time outside every op add up to. `steps` > 0 adds ms per step.
std::string format_table(const std::vector<OpStats>& rows, int64_t steps = 0, size_t max_rows = 25);

// The recorded ops as Chrome trace events (Options::trace_events): the forward, backward and
// optimizer ops on row "compute", a thread beside training on a row of its own ("comm ops 1",
// "data ops 2": the phase and the thread's number); pid 0 until the caller sets the rank
// (DistributedDataParallel::write_trace does).
std::vector<TraceEvent> trace_events();

// Sets the phase of the ops this thread records until the guard ends (the engine: backward; an
// optimizer step: optimizer; a communication thread: comm, a DataLoader's worker: data, for their
// whole lives).
class PhaseGuard {
 public:
  explicit PhaseGuard(Phase phase);
  ~PhaseGuard();
  PhaseGuard(const PhaseGuard&) = delete;
  PhaseGuard& operator=(const PhaseGuard&) = delete;

 private:
  Phase previous_;
};

// Stops recording until the guard ends, when it was on: an evaluation or a checkpoint inside a
// profiled training loop, which the table should not count (nor its wall time).
class PauseGuard {
 public:
  PauseGuard();
  ~PauseGuard();
  PauseGuard(const PauseGuard&) = delete;
  PauseGuard& operator=(const PauseGuard&) = delete;

 private:
  bool was_enabled_;
};

// Records one op from construction to destruction. `name` must outlive the scope when it is a
// literal; the std::string overload copies it (a backward node's name).
class OpScope {
 public:
  explicit OpScope(const char* name, double flops = 0, double bytes = 0) {
    if (enabled()) begin(name, flops, bytes);
  }
  explicit OpScope(const std::string& name, double flops = 0, double bytes = 0) {
    if (enabled()) begin(name.c_str(), flops, bytes);
  }
  ~OpScope() {
    if (active_) end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  void begin(const char* name, double flops, double bytes);
  void end() noexcept;
  bool active_ = false;
};

}  // namespace ringgrad::profiler
