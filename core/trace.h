// Trace events in the Chrome trace format (chrome://tracing, https://ui.perfetto.dev), the shared
// currency of every timeline ringgrad records: communication threads record them now (dist/), and
// compute events merge into the same file later (write_chrome_trace takes any mix).
//
// One event is a complete ("X") event: a named interval on one row. A row is (pid, tid): ringgrad
// uses pid = rank and tid = the thread's role ("comm:ring"), so a merged file shows one block per
// rank with one row per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringgrad {

struct TraceEvent {
  std::string name;      // "allreduce #12"
  std::string category;  // "comm", "compute"
  int pid = 0;           // the rank
  std::string thread;    // the row within the rank: "comm:ring", "main"
  double start_us = 0;   // trace_clock_us() at the start
  double duration_us = 0;
  std::string args_json;  // an extra JSON object body, e.g. "\"bytes\": 4000", or empty
};

// Microseconds on the steady clock. One clock for every thread and every process on a machine
// (CLOCK_MONOTONIC), so events of ranks on one machine line up in a merged file.
double trace_clock_us();

// Writes {"traceEvents": [...]} to path, atomically (a temporary file renamed into place).
// Throws ringgrad::Error naming the path when it cannot.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events);

}  // namespace ringgrad
