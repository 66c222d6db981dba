// What the training-throughput benchmarks (ddp_train: W1 / W2, gpt_train: W3) share, so that both
// take the same flags and measure the same way: "--flag value" parsing and the timed loop.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <ringgrad.h>

namespace bench {

struct TrainFlags {
  std::string model, data, backend = "auto", comm_hook = "allreduce";
  std::string step_times;          // --step-times FILE: each timed step's wall ms, one per line, in order
  std::string trace;               // --trace FILE: DDP's Chrome trace of every rank (2+ ranks), all steps
  std::string precision = "fp32";  // --precision fp32|bf16: the parameters' dtype (bf16: f32 master weights)
  int steps = 200, warmup = 20, threads = 1, batch = 0, block = 128;
  int zero = 0;  // --zero 1|2|3: the optimizer wrapped in dist::ZeroOptimizer (DDP even at one rank)
  bool checkpoint_activations = false;         // --checkpoint-activations 0|1 (gpt_train: per block)
  double bucket_mb = 25, first_bucket_mb = 1;  // DDPOptions' defaults
  double staging_mb = 1;                       // ZeroOptions' default (stage 2's shared staging)
  int powersgd_rank = 4;                       // --comm-hook powersgd (as the examples)
  int64_t powersgd_start = 10;
};

// Parses "--flag value" pairs into `flags` (its fields hold the program's defaults). `extra` names
// the flags beyond the common --data --steps --warmup --threads --batch --backend --bucket-mb
// --first-bucket-mb --comm-hook --step-times --trace --precision --zero --staging-mb
// --powersgd-rank --powersgd-start that this
// program takes (--model, --block, --checkpoint-activations).
// False, after printing the flags it takes, on anything else.
inline bool parse_train_flags(int argc, char** argv, TrainFlags& flags, std::initializer_list<std::string> extra) {
  std::string accepted =
      "--data --steps --warmup --threads --batch --backend --bucket-mb --first-bucket-mb --comm-hook --step-times "
      "--trace --precision --zero --staging-mb --powersgd-rank --powersgd-start";
  for (const std::string& e : extra) accepted += " " + e;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    const bool is_extra = std::find(extra.begin(), extra.end(), flag) != extra.end();
    if (flag == "--data") flags.data = value;
    else if (flag == "--steps") flags.steps = std::stoi(value);
    else if (flag == "--warmup") flags.warmup = std::stoi(value);
    else if (flag == "--threads") flags.threads = std::stoi(value);
    else if (flag == "--batch") flags.batch = std::stoi(value);
    else if (flag == "--backend") flags.backend = value;
    else if (flag == "--bucket-mb") flags.bucket_mb = std::stod(value);
    else if (flag == "--first-bucket-mb") flags.first_bucket_mb = std::stod(value);
    else if (flag == "--staging-mb") flags.staging_mb = std::stod(value);
    else if (flag == "--comm-hook") flags.comm_hook = value;
    else if (flag == "--powersgd-rank") flags.powersgd_rank = std::stoi(value);
    else if (flag == "--powersgd-start") flags.powersgd_start = std::stoll(value);
    else if (flag == "--step-times") flags.step_times = value;
    else if (flag == "--trace") flags.trace = value;
    else if (flag == "--zero") {
      flags.zero = std::stoi(value);
      if (flags.zero < 0 || flags.zero > 3) {
        std::fprintf(stderr, "--zero takes 0, 1, 2 or 3, got %s\n", value.c_str());
        return false;
      }
    } else if (flag == "--precision") {
      if (value != "fp32" && value != "bf16") {
        std::fprintf(stderr, "--precision takes fp32 or bf16, got %s\n", value.c_str());
        return false;
      }
      flags.precision = value;
    } else if (is_extra && flag == "--model") flags.model = value;
    else if (is_extra && flag == "--block") flags.block = std::stoi(value);
    else if (is_extra && flag == "--checkpoint-activations") {
      if (value != "0" && value != "1") {
        std::fprintf(stderr, "--checkpoint-activations takes 0 or 1, got %s\n", value.c_str());
        return false;
      }
      flags.checkpoint_activations = value == "1";
    } else {
      std::fprintf(stderr, "unknown flag %s (flags: %s)\n", flag.c_str(), accepted.c_str());
      return false;
    }
  }
  return true;
}

// The parameters' dtype of --precision.
inline ringgrad::DType precision_dtype(const TrainFlags& flags) {
  return flags.precision == "bf16" ? ringgrad::DType::bf16 : ringgrad::DType::f32;
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
