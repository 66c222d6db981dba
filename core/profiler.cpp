#include "core/profiler.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <utility>

namespace ringgrad::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

// A long run must not grow the event list without bound (as DDP's recorder).
constexpr size_t kMaxTraceEvents = 1 << 20;

// An op this thread has begun and not yet ended.
struct Frame {
  std::string name;
  double start_us = 0;
  double children_us = 0;  // total time of the recorded ops it called
  double flops = 0, bytes = 0;
  int exceptions = 0;  // std::uncaught_exceptions() at the start: more at the end means it threw
};

thread_local std::vector<Frame> t_open_ops;
thread_local Phase t_phase = Phase::forward;

// The trace row of this thread's ops: the training thread's phases share "compute" (their ops nest
// in one another); a thread beside it gets a row of its own, numbered, so events never overlap on
// one row without nesting.
std::string trace_row(Phase phase) {
  if (phase != Phase::comm && phase != Phase::data) return "compute";
  static std::atomic<int> threads{0};
  thread_local const int number = ++threads;
  return std::string(phase_name(phase)) + " ops " + std::to_string(number);
}

// Whether ops of this phase run on the training thread (their self times share its wall time).
bool on_training_thread(Phase phase) { return phase != Phase::comm && phase != Phase::data; }

// What every thread records, under one lock: ops end often but the lock is held for a map update.
struct Recording {
  std::mutex mutex;
  Options options;
  std::map<std::pair<int, std::string>, OpStats> rows;  // by (phase, name)
  std::vector<TraceEvent> events;
  double wall_us = 0;           // recorded so far, over closed enable..disable intervals
  double enabled_since_us = 0;  // when the open interval began (enabled() only)
};

Recording& recording() {
  static Recording r;
  return r;
}

std::string json_args(double flops, double bytes) {
  char text[96];
  if (flops > 0) {
    std::snprintf(text, sizeof text, "\"flops\": %.0f", flops);
  } else if (bytes > 0) {
    std::snprintf(text, sizeof text, "\"bytes\": %.0f", bytes);
  } else {
    return "";
  }
  return text;
}

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
    case Phase::comm: return "comm";
    case Phase::data: return "data";
  }
  return "?";
}

void enable(Options options) {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.options = options;
  if (!detail::g_enabled.load()) r.enabled_since_us = trace_clock_us();
  detail::g_enabled.store(true);
}

void disable() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (detail::g_enabled.load()) r.wall_us += trace_clock_us() - r.enabled_since_us;
  detail::g_enabled.store(false);
}

void reset() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.rows.clear();
  r.events.clear();
  r.wall_us = 0;
  r.enabled_since_us = trace_clock_us();
}

std::vector<OpStats> op_table() {
  Recording& r = recording();
  std::vector<OpStats> rows;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& [key, stats] : r.rows) rows.push_back(stats);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const OpStats& a, const OpStats& b) { return a.self_us > b.self_us; });
  return rows;
}

double recorded_wall_us() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.wall_us + (detail::g_enabled.load() ? trace_clock_us() - r.enabled_since_us : 0.0);
}

std::vector<TraceEvent> trace_events() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.events;
}

PhaseGuard::PhaseGuard(Phase phase) : previous_(t_phase) { t_phase = phase; }
PhaseGuard::~PhaseGuard() { t_phase = previous_; }

PauseGuard::PauseGuard() : was_enabled_(enabled()) {
  if (was_enabled_) disable();
}

PauseGuard::~PauseGuard() {
  if (!was_enabled_) return;
  Options options;
  {
    Recording& r = recording();
    std::lock_guard<std::mutex> lock(r.mutex);
    options = r.options;
  }
  enable(options);
}

void OpScope::begin(const char* name, double flops, double bytes) {
  active_ = true;
  t_open_ops.push_back(Frame{name, trace_clock_us(), 0, flops, bytes, std::uncaught_exceptions()});
}

void OpScope::end() noexcept {
  const double end_us = trace_clock_us();
  Frame op = std::move(t_open_ops.back());
  t_open_ops.pop_back();
  if (std::uncaught_exceptions() > op.exceptions) return;  // the op threw: no call to count
  const double total_us = end_us - op.start_us;
  if (!t_open_ops.empty()) t_open_ops.back().children_us += total_us;

  try {  // a destructor: a failed allocation loses this record, never the program
    Recording& r = recording();
    std::lock_guard<std::mutex> lock(r.mutex);
    OpStats& row = r.rows[{static_cast<int>(t_phase), op.name}];
    if (row.calls == 0) {
      row.name = op.name;
      row.phase = t_phase;
    }
    row.calls += 1;
    row.total_us += total_us;
    row.self_us += total_us - op.children_us;
    row.flops += op.flops;
    row.bytes += op.bytes;
    if (r.options.trace_events && r.events.size() < kMaxTraceEvents)
      r.events.push_back(TraceEvent{std::move(op.name), std::string("op:") + phase_name(t_phase), 0, trace_row(t_phase),
                                    op.start_us, total_us, json_args(op.flops, op.bytes)});
  } catch (...) {}
}

std::string format_table(const std::vector<OpStats>& rows, int64_t steps, size_t max_rows) {
  const double wall_ms = recorded_wall_us() / 1e3;
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-9s %-32s %8s %10s %10s %7s %9s %9s %8s\n", "phase", "op", "calls", "total ms",
                "self ms", "self %", steps > 0 ? "self/step" : "", "GFLOP/s", "GB/s");
  out += line;
  double shown_self_ms = 0, rest_self_ms = 0, compute_self_ms = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const OpStats& row = rows[i];
    const double total_ms = row.total_us / 1e3, self_ms = row.self_us / 1e3;
    if (on_training_thread(row.phase)) compute_self_ms += self_ms;
    if (max_rows > 0 && i >= max_rows) {
      rest_self_ms += self_ms;
      continue;
    }
    shown_self_ms += self_ms;
    char per_step[32] = "", gflops[32] = "", gbps[32] = "";
    if (steps > 0) std::snprintf(per_step, sizeof per_step, "%.3f", self_ms / static_cast<double>(steps));
    if (row.flops > 0 && row.total_us > 0) std::snprintf(gflops, sizeof gflops, "%.1f", row.flops / row.total_us / 1e3);
    if (row.bytes > 0 && row.total_us > 0) std::snprintf(gbps, sizeof gbps, "%.2f", row.bytes / row.total_us / 1e3);
    std::snprintf(line, sizeof line, "%-9s %-32.32s %8lld %10.2f %10.2f %6.1f%% %9s %9s %8s\n", phase_name(row.phase),
                  row.name.c_str(), static_cast<long long>(row.calls), total_ms, self_ms,
                  wall_ms > 0 ? 100.0 * self_ms / wall_ms : 0.0, per_step, gflops, gbps);
    out += line;
  }
  if (rest_self_ms > 0) {
    std::snprintf(line, sizeof line, "%zu more ops: self %.2f ms\n", rows.size() - max_rows, rest_self_ms);
    out += line;
  }
  // The comm and data threads' ops run beside the training thread's: left out of its share.
  std::snprintf(line, sizeof line,
                "recorded %.2f ms of wall time%s; the forward, backward and optimizer ops account for %.2f ms "
                "(%.1f%%), the rest ran outside every recorded op\n",
                wall_ms, steps > 0 ? (" over " + std::to_string(steps) + " steps").c_str() : "", compute_self_ms,
                wall_ms > 0 ? 100.0 * compute_self_ms / wall_ms : 0.0);
  out += line;
  return out;
}

}  // namespace ringgrad::profiler
