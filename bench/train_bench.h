// What the training-throughput benchmarks (ddp_train: W1 / W2, gpt_train: W3) share, so that both
// take the same flags and measure the same way: the command line and the timed loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <ringgrad.h>

namespace bench {

struct TrainFlags {
  std::string model, data, backend = "auto", comm_hook = "allreduce";
  std::string step_times;          // --step-times FILE: each timed step's wall ms, one per line, in order
  std::string trace;               // --trace FILE: DDP's Chrome trace of every rank (2+ ranks), all steps
  std::string log_dir;             // --log-dir DIR: TensorBoard event files of the timed steps (each rank)
  std::string precision = "fp32";  // --precision fp32|bf16: the parameters' dtype (bf16: f32 master weights)
  int steps = 200, warmup = 20, threads = 1, batch = 0, block = 128;
  int zero = 0;  // --zero 1|2|3: the optimizer wrapped in dist::ZeroOptimizer (DDP even at one rank)
  bool checkpoint_activations = false;         // --checkpoint-activations 0|1 (gpt_train: per block)
  double bucket_mb = 25, first_bucket_mb = 1;  // DDPOptions' defaults
  double staging_mb = 1;                       // ZeroOptions' default (stage 2's shared staging)
  int powersgd_rank = 4;                       // --comm-hook powersgd (as the examples)
  int64_t powersgd_start = 10;
  bool profile = false;  // --profile: the per-op table of the timed steps (core/profiler.h), rank 0
};

// Parses the command line into `flags` (its fields hold the program's defaults) with the common
// --data --steps --warmup --threads --batch --backend --bucket-mb --first-bucket-mb --comm-hook
// --step-times --trace --precision --zero --staging-mb --powersgd-rank --powersgd-start --profile, plus the
// `extra` ones this program takes (--model, --block, --checkpoint-activations). Returns the exit
// code when the program should stop: --help, --version, or a mistake (exit 2, with the usage).
std::optional<int> parse_train_flags(int argc, char** argv, TrainFlags& flags, std::initializer_list<std::string> extra,
                                     const std::string& about);

// The parameters' dtype of --precision.
inline ringgrad::DType precision_dtype(const TrainFlags& flags) {
  return flags.precision == "bf16" ? ringgrad::DType::bf16 : ringgrad::DType::f32;
}

// --log-dir: written after the timed steps, so that logging costs them nothing. Each step's wall
// time as bench/step_ms at its step, then at the last step the steps per second and DDP's mean
// communication, exposed communication and overlap. One file per rank (suffix ".rank<r>").
inline void log_timed_steps(const TrainFlags& flags, const std::vector<double>& step_ms, double seconds,
                            ringgrad::dist::ProcessGroup& group, const ringgrad::dist::DistributedDataParallel* ddp) {
  ringgrad::SummaryWriter tb(flags.log_dir, ".rank" + std::to_string(group.rank()));
  for (size_t i = 0; i < step_ms.size(); ++i) tb.add_scalar("bench/step_ms", step_ms[i], static_cast<int64_t>(i + 1));
  const auto last = static_cast<int64_t>(step_ms.size());
  tb.add_scalar("bench/steps_per_s", static_cast<double>(last) / seconds, last);
  if (ddp != nullptr && ddp->stats().steps > 0) {
    const ringgrad::dist::DDPStats& s = ddp->stats();
    const double n = static_cast<double>(s.steps);
    tb.add_scalar("comm/comm_ms", s.total.comm_ms / n, last);
    tb.add_scalar("comm/exposed_ms", s.total.exposed_comm_ms / n, last);
    tb.add_scalar("comm/overlap_percent", s.total.overlap_percent(), last);
  }
  // The benchmarks train on the CPU.
  tb.add_scalar("memory/peak_mib",
                static_cast<double>(ringgrad::memory_stats(ringgrad::Device::cpu()).peak_allocated) / (1 << 20), last);
}

// CPU seconds (user, system) used so far by the calling thread, or by the whole process.
struct CpuTime {
  double user = 0, sys = 0;
  static CpuTime of(int who) {
    rusage u{};
    getrusage(who, &u);
    return {u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6, u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6};
  }
};

// `warmup` untimed steps, then `steps` timed ones between two barriers (so every rank's clock spans
// the same work); DDP's stats restart with the timed steps. Returns the timed seconds. Every rank
// prints where its timed steps went, per step: wall time, this (the training) thread's CPU time, the
// other threads' (communication, BLAS) CPU time. On a core of its own, wall minus all CPU is time
// the rank waited with nothing to run -- the early rank's, mostly: the step waits for the late one,
// whose CPU is the figure to shrink (a rank whose caller is blocked spins, so its "other threads"
// CPU includes idle time: Note [Spinning for a blocked caller] in dist/comm_thread.cpp).
// wire_bytes_per_step, when given: what this rank's own messages sent per timed step
// (dist::transport_bytes(), both transports).
inline double time_steps(const std::function<void()>& step, const TrainFlags& flags,
                         ringgrad::dist::ProcessGroup& group, ringgrad::dist::DistributedDataParallel* ddp,
                         double* wire_bytes_per_step = nullptr) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < flags.warmup; ++i) step();
  group.barrier()->wait();
  if (ddp) ddp->reset_stats();
  if (flags.profile) {  // the timed steps only; their ops join --trace's events too
    ringgrad::profiler::reset();
    ringgrad::profiler::enable({.trace_events = !flags.trace.empty()});
  }
  const CpuTime thread0 = CpuTime::of(RUSAGE_THREAD), process0 = CpuTime::of(RUSAGE_SELF);
  const ringgrad::dist::TransportBytes sent0 = ringgrad::dist::transport_bytes();
  const auto t0 = Clock::now();
  std::vector<double> step_ms;  // each step's wall time: its spread is what lockstep ranks wait for
  step_ms.reserve(static_cast<size_t>(std::max(flags.steps, 0)));
  for (int i = 0; i < flags.steps; ++i) {
    const auto s0 = Clock::now();
    step();
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
  }
  if (flags.profile) ringgrad::profiler::disable();
  group.barrier()->wait();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const ringgrad::dist::TransportBytes sent1 = ringgrad::dist::transport_bytes();
  if (wire_bytes_per_step != nullptr && flags.steps > 0)
    *wire_bytes_per_step =
        static_cast<double>((sent1.same_machine - sent0.same_machine) + (sent1.other_machines - sent0.other_machines)) /
        flags.steps;
  const CpuTime thread1 = CpuTime::of(RUSAGE_THREAD), process1 = CpuTime::of(RUSAGE_SELF);
  if (!flags.step_times.empty()) {  // with 2+ ranks each writes FILE.<rank>
    const std::string path =
        group.size() > 1 ? flags.step_times + "." + std::to_string(group.rank()) : flags.step_times;
    std::ofstream out(path);
    for (const double ms : step_ms) out << ms << '\n';
    if (!out) std::fprintf(stderr, "could not write --step-times %s\n", path.c_str());
  }
  if (!flags.log_dir.empty()) log_timed_steps(flags, step_ms, seconds, group, ddp);
  if (flags.steps > 0) {
    const double per_step = 1e3 / flags.steps;  // seconds in all -> ms per step
    const double user = (thread1.user - thread0.user) * per_step, sys = (thread1.sys - thread0.sys) * per_step;
    const double others = ((process1.user - process0.user) + (process1.sys - process0.sys)) * per_step - user - sys;
    std::fprintf(stderr,
                 "rank %d per step: wall %.2f ms; training thread CPU %.2f ms (user %.2f, sys %.2f); other "
                 "threads' CPU %.2f ms\n",
                 group.rank(), seconds * per_step, user + sys, user, sys, others);
    std::sort(step_ms.begin(), step_ms.end());
    auto at = [&](double q) { return step_ms[static_cast<size_t>(q * static_cast<double>(step_ms.size() - 1))]; };
    std::fprintf(stderr, "rank %d step times: min %.2f, p10 %.2f, median %.2f, p90 %.2f, max %.2f ms\n", group.rank(),
                 at(0), at(0.1), at(0.5), at(0.9), at(1));
  }
  if (flags.profile && group.rank() == 0)
    std::printf("ops of rank 0's timed steps (--profile):\n%s",
                ringgrad::profiler::format_table(ringgrad::profiler::op_table(), flags.steps).c_str());
  return seconds;
}

// DDP's overlap percentage over the timed steps (0 without DDP); every rank prints its summary to
// stderr (the late rank's exposed communication is the one the step waits for).
inline double report_overlap(const ringgrad::dist::DistributedDataParallel* ddp, int rank) {
  if (!ddp) return 0;
  std::fprintf(stderr, "rank %d %s\n", rank, ddp->stats().summary().c_str());
  return ddp->stats().total.overlap_percent();
}

}  // namespace bench
