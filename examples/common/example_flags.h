// The flags both examples (mnist, gpt_mini) take alike: --comm-hook and PowerSGD's, --log-dir,
// --profile, --zero. Included by each example's config.cpp only, the one file of a program that includes CLI11.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "dist/ddp/comm_hook.h"
#include "examples/common/flags.h"

namespace ringgrad::examples {

// --comm-hook, --powersgd-rank and --powersgd-start, the same in both examples. Every name
// dist::make_comm_hook takes.
inline void add_comm_hook_flags(CLI::App& app, std::string& comm_hook, dist::PowerSgdOptions& powersgd) {
  app.add_option("--comm-hook", comm_hook,
                 "how gradients travel: allreduce (f32 average), fp16 (compressed; fp32 models), or bf16 / FP8 on "
                 "the low-precision ring, with or without error feedback (docs/compression.md): " +
                     std::string(dist::comm_hook_names()))
      ->check([](const std::string& name) -> std::string {
        try {
          dist::make_comm_hook(name);
          return "";
        } catch (const std::exception& e) {
          return e.what();
        }
      });
  app.add_option("--powersgd-rank", powersgd.rank, "--comm-hook powersgd: the rank r of each gradient's approximation")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--powersgd-start", powersgd.start_iteration,
                 "--comm-hook powersgd: steps of plain AllReduce before compressing")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
}

// The two flags, the same in both examples.
inline void add_log_dir_flags(CLI::App& app, std::string& log_dir, bool& all_ranks) {
  app.add_option("--log-dir", log_dir,
                 "write TensorBoard event files here: loss, learning rate, throughput, step time, communication, "
                 "memory (tensorboard --logdir DIR)");
  app.add_flag("--log-all-ranks", all_ranks, "with --log-dir: every rank writes its own file, not only rank 0");
}

// --profile: rank 0 prints a table of the training steps' ops by self time at the end (evaluation
// and checkpoints left out); with --trace the ops join the Chrome trace too.
inline void add_profile_flag(CLI::App& app, bool& profile) {
  app.add_flag("--profile", profile,
               "after training, print the training steps' ops by self time: calls, total and self ms, GFLOP/s, GB/s "
               "(rank 0; docs/performance.md)");
}

}  // namespace ringgrad::examples

namespace ringgrad::flags {

// --zero and --memory-report, the same in both examples (examples/common/zero.h acts on them).
inline void add_zero_flags(CLI::App& app, int& zero, bool& memory_report) {
  app.add_option("--zero", zero,
                 "ZeRO stage: 0 plain DDP, 1 optimizer state sharded across ranks, 2 gradients too, 3 parameters too "
                 "(docs/zero.md)")
      ->check(int_in(0, 3));
  app.add_flag("--memory-report", memory_report,
               "after training, print the bytes per parameter of parameters, gradients and optimizer state, and "
               "the allocator's peak");
}

}  // namespace ringgrad::flags
