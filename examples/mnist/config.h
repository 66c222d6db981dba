// examples/mnist's command line: every flag, its default and its check, apart from the training
// loop so that a fuzzer (tests/fuzz/fuzz_mnist_cli.cpp) can drive it alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "examples/common/comm_hook.h"
#include "examples/common/command_line.h"

namespace mnist {

struct Config {
  std::string model = "mlp", data = "/usr/share/datasets/fashion-mnist", optimizer = "sgd", precision = "fp32";
  std::string checkpoint, resume;
  std::string export_path;                      // --export: the trained weights as .safetensors (docs/interop.md)
  int epochs = 1, batch_size = 0, threads = 0;  // 0: chosen by finish() / by the machine
  int64_t checkpoint_every = 0, limit_steps = 0;
  double lr = 0.05, momentum = 0.9, weight_decay = 0.0;
  uint64_t seed = 1;
  std::string input_norm;  // standard | half | none; default depends on the model (finish)
  // Data parallelism.
  int accum = 1;
  double bucket_mb = 25;
  std::string comm_hook = "allreduce", backend = "auto", trace, simulate_network;
  ringgrad::dist::PowerSgdOptions powersgd = ringgrad::examples::example_powersgd_options();  // --powersgd-*
  std::optional<std::pair<double, double>> simulated_network;  // (GB/s, latency us) from --simulate-network
  std::string device = "cpu";                                  // cpu, cuda (the local rank's GPU) or cuda:N
  int64_t stats_every = 200;
  int64_t eval_every = 0;      // test accuracy every N steps as well as at epoch ends (0: epoch ends only)
  int zero = 0;                // ZeRO stage: 0 plain DDP, 1 optimizer state sharded, 2 gradients too
  bool memory_report = false;  // print where a rank's memory goes after training
  std::string log_dir;         // --log-dir: TensorBoard event files (examples/common/run_log.h)
  bool log_all_ranks = false;
  bool profile = false;  // --profile: the per-op table of the training steps (core/profiler.h)
};

// The largest batch a flag may ask for: a bound, so that a typo cannot allocate without end.
inline constexpr int kMaxBatchSize = 1 << 16;

// Declares every flag on `app`, bound to the fields of `c`, each with its range check.
void add_flags(CLI::App& app, Config& c);

// The whole command line: declares the flags on a CLI::App and parses argv into c (--help,
// --version, a mistake: flags::parse_command_line). Returns the exit code when the program should
// stop here; finish(c) is still to be called.
std::optional<int> parse_flags(int argc, const char* const* argv, Config& c);

// After a successful parse: fills in the defaults that depend on other flags and parses the
// compound ones. Throws ringgrad::Error naming the flag.
void finish(Config& c);

}  // namespace mnist
