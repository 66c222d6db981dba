// examples/gpt_mini's command line: every flag, its default and its check, apart from training and
// sampling so that a fuzzer (tests/fuzz/fuzz_gpt_mini_cli.cpp) can drive it alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "examples/common/comm_hook.h"
#include "examples/common/command_line.h"

namespace gpt_mini {

struct Config {
  std::string data = "/usr/share/games/fortunes", precision = "fp32", checkpoint, resume, prompt = "\n";
  std::string backend = "auto", comm_hook = "allreduce";
  ringgrad::dist::PowerSgdOptions powersgd =
      ringgrad::examples::example_powersgd_options();  // --powersgd-rank, --powersgd-start
  std::string device = "cpu";                          // cpu, cuda (the local rank's GPU) or cuda:N
  std::string export_path;  // --export: the trained weights as .safetensors (docs/interop.md)
  std::string init_from;    // --init-from: start from a .safetensors file's weights
  std::string log_dir;      // --log-dir: TensorBoard event files (examples/common/run_log.h)
  bool log_all_ranks = false;
  bool profile = false;  // --profile: the per-op table of the training steps (core/profiler.h)
  int64_t max_steps = 3000, lr_decay_steps = 0, warmup = 100, batch_size = 16, block_size = 128;
  int64_t n_layer = 4, n_head = 4, n_embd = 128, accum = 1, eval_every = 250, eval_batches = 20;
  int64_t checkpoint_every = 0, log_every = 50, num_chars = 400, top_k = 0, threads = 0;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0, temperature = 1.0, bucket_mb = 25;
  double first_bucket_mb = 1;  // DDPOptions' defaults, as bucket_mb
  uint64_t seed = 1;
  bool generate = false;
  int zero = 0;                         // ZeRO stage: 0 plain DDP, 1 optimizer state sharded, 2 gradients too
  bool memory_report = false;           // print where a rank's memory goes after training
  bool checkpoint_activations = false;  // recompute each block's activations in backward
};

// Bounds that keep a typo from allocating without end: tokens in one micro-batch (batch x block)
// and the model's approximate parameter count (12 x layers x width^2).
inline constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 20;
inline constexpr int64_t kMaxParameters = int64_t{1} << 30;

// Declares every flag on `app`, bound to the fields of `c`, each with its range check.
void add_flags(CLI::App& app, Config& c);

// The whole command line: declares the flags on a CLI::App and parses argv into c (--help,
// --version, a mistake: flags::parse_command_line). Returns the exit code when the program should
// stop here; finish(c) is still to be called.
std::optional<int> parse_flags(int argc, const char* const* argv, Config& c);

// After a successful parse: the checks that involve several flags, and defaults that depend on
// others. Throws ringgrad::Error naming the flags.
void finish(Config& c);

}  // namespace gpt_mini
