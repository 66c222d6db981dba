// The training benchmarks' command line (bench/train_bench.h), the one file of ddp_train and
// gpt_train that includes CLI11.
#include <CLI/CLI.hpp>
#include <algorithm>

#include "bench/train_bench.h"
#include "examples/common/command_line.h"
#include "examples/common/flags.h"

namespace bench {

std::optional<int> parse_train_flags(int argc, char** argv, TrainFlags& flags, std::initializer_list<std::string> extra,
                                     const std::string& about) {
  namespace rf = ringgrad::flags;
  const auto takes = [&](const std::string& f) { return std::find(extra.begin(), extra.end(), f) != extra.end(); };
  CLI::App app{about};
  app.add_option("--data", flags.data, "the dataset's directory or file")->check(rf::non_empty);
  app.add_option("--steps", flags.steps, "timed steps")->check(rf::int_in(1, 10'000'000));
  app.add_option("--warmup", flags.warmup, "untimed steps first")->check(rf::int_in(0, 10'000'000));
  app.add_option("--threads", flags.threads, "compute threads per rank")->check(rf::thread_count());
  app.add_option("--batch", flags.batch, "batch per rank (0: the workload's default)")->check(rf::int_in(0, 1 << 20));
  app.add_option("--backend", flags.backend, "process-group backend (auto, ring, tree, mpi, hierarchical)")
      ->check(rf::non_empty);
  app.add_option("--bucket-mb", flags.bucket_mb, "DDP's bucket cap, MiB")->check(rf::finite_in(0, 1e4, true));
  app.add_option("--first-bucket-mb", flags.first_bucket_mb, "DDP's first bucket cap, MiB")
      ->check(rf::finite_in(0, 1e4, true));
  app.add_option("--staging-mb", flags.staging_mb, "ZeRO stage 2's shared staging, MiB")->check(rf::finite_in(0, 1e4));
  app.add_option("--comm-hook", flags.comm_hook, "DDP communication hook, as the examples name them")
      ->check(rf::non_empty);
  app.add_option("--powersgd-rank", flags.powersgd_rank, "PowerSGD's rank")->check(rf::int_in(1, 1 << 16));
  app.add_option("--powersgd-start", flags.powersgd_start, "steps of plain AllReduce before PowerSGD")
      ->check(rf::int_in(0, int64_t{1} << 40));
  app.add_option("--step-times", flags.step_times, "write each timed step's wall ms to this file");
  app.add_option("--trace", flags.trace, "write DDP's Chrome trace of every rank to this file");
  app.add_option("--log-dir", flags.log_dir,
                 "write TensorBoard event files here, one per rank, after the timed steps: each step's time, the "
                 "mean communication figures and the memory peak");
  app.add_option("--precision", flags.precision, "the parameters' dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--zero", flags.zero, "ZeRO stage (0: plain DDP)")->check(rf::int_in(0, 3));
  app.add_flag("--profile", flags.profile,
               "print a table of the timed steps' ops by self time (rank 0; with --trace, the ops join the trace)");
  if (takes("--model")) app.add_option("--model", flags.model, "W1 or W2")->check(CLI::IsMember({"mlp", "cnn"}));
  if (takes("--block")) app.add_option("--block", flags.block, "context length")->check(rf::int_in(1, 1 << 16));
  int checkpoint = flags.checkpoint_activations;
  if (takes("--checkpoint-activations"))
    app.add_option("--checkpoint-activations", checkpoint, "1: recompute each block's activations in backward")
        ->check(rf::int_in(0, 1));
  const auto code = rf::parse_command_line(app, argc, argv);
  flags.checkpoint_activations = checkpoint != 0;
  return code;
}

}  // namespace bench
