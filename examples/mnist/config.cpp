#include "examples/mnist/config.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "examples/common/comm_hook.h"
#include "examples/common/example_flags.h"

namespace mnist {

using namespace ringgrad;

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--model", c.model, "mlp (784-512-512-10), cnn or resnet (residual blocks with BatchNorm2d)")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet"}));
  app.add_option("--data", c.data, "folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]")
      ->check(flags::non_empty);
  app.add_option("--epochs", c.epochs, "epochs to train")->check(flags::int_in(1, 1000000));
  app.add_option("--batch-size", c.batch_size, "batch size (default: 128 for mlp, 64 for cnn and resnet)")
      ->check(flags::int_in(1, kMaxBatchSize));
  app.add_option("--lr", c.lr, "learning rate")->check(flags::finite_in(0, 1e3));
  app.add_option("--momentum", c.momentum, "SGD momentum")->check(flags::finite_in(0, 1));
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(flags::finite_in(0, 1e3));
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--precision", c.precision, "fp32, fp16 or bf16 parameters")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--seed", c.seed, "seed for initialisation and shuffling");
  app.add_option("--input-norm", c.input_norm,
                 "input scaling: standard ((p - mean) / std of the training pixels), half ((p - 0.5) / 0.5), "
                 "none (p in [0, 1]); default: standard for mlp, half for cnn and resnet")
      ->check(CLI::IsMember({"standard", "half", "none"}));
  app.add_option("--threads", c.threads, "compute threads (default: cores / ranks on this node)")
      ->check(flags::thread_count());
  app.add_option("--device", c.device, "cpu, cuda (under mpirun: the local rank's GPU) or cuda:N")
      ->check(flags::non_empty);
  app.add_option("--checkpoint", c.checkpoint, "write a checkpoint here at each epoch end")->check(flags::non_empty);
  app.add_option("--checkpoint-every", c.checkpoint_every, "also write it every N steps (0: only at epoch ends)")
      ->check(flags::int_in(0, INT64_MAX));
  app.add_option("--resume", c.resume, "continue from this checkpoint")->check(flags::non_empty);
  app.add_option("--export", c.export_path,
                 "after training, write the model's weights here as .safetensors (rank 0), its metadata naming the "
                 "model, the input normalisation and the test accuracy (docs/interop.md)")
      ->check(flags::non_empty);
  app.add_option("--limit-steps", c.limit_steps, "stop after this many steps in total (0: no limit)")
      ->check(flags::int_in(0, INT64_MAX));
  app.add_option("--accum", c.accum, "micro-batches per optimizer step (gradient accumulation under no_sync)")
      ->check(flags::int_in(1, 1 << 20));
  app.add_option("--bucket-mb", c.bucket_mb, "DDP bucket size cap in MiB")->check(flags::finite_in(0, 1 << 20, true));
  examples::add_comm_hook_flags(app, c.comm_hook, c.powersgd);
  app.add_option("--backend", c.backend, "process group backend: auto, ring, tree, mpi, hierarchical, nccl")
      ->check(CLI::IsMember({"auto", "ring", "tree", "mpi", "hierarchical", "nccl"}));
  examples::add_log_dir_flags(app, c.log_dir, c.log_all_ranks);
  examples::add_profile_flag(app, c.profile);
  app.add_option("--stats-every", c.stats_every,
                 "print DDP's compute / communication / overlap figures every N steps (0: never)")
      ->check(flags::int_in(0, INT64_MAX));
  app.add_option("--eval-every", c.eval_every,
                 "also print test accuracy every N steps, against training time (0: at epoch ends only)")
      ->check(flags::int_in(0, INT64_MAX));
  app.add_option("--trace", c.trace, "write a Chrome trace (all ranks) of the last epoch's first steps here")
      ->check(flags::non_empty);
  flags::add_zero_flags(app, c.zero, c.memory_report);
  app.add_option("--simulate-network", c.simulate_network,
                 "model a slower network 'GBPS,LATENCY_US' (e.g. 0.5,100) to watch overlap on one machine");
}

void finish(Config& c) {
  if (c.batch_size == 0) c.batch_size = c.model == "mlp" ? 128 : 64;
  // Measured over seeds 0-3 (docs/mnist.md): the MLP does best on standardised pixels (85.6% vs 84.0%
  // after one epoch), the CNN on (p - 0.5) / 0.5 (88.8% vs 88.5%).
  if (c.input_norm.empty()) c.input_norm = c.model == "mlp" ? "standard" : "half";
  examples::zero_reduce_scatter_wire("mnist", c.comm_hook, c.zero);  // refuses what stage 2 cannot carry
  if (!c.simulate_network.empty()) {
    std::istringstream in(c.simulate_network);
    double gbps = 0, latency_us = 0;
    char comma = 0;
    const bool ok = (in >> gbps >> comma >> latency_us) && comma == ',' && in.peek() == EOF && std::isfinite(gbps) &&
                    std::isfinite(latency_us) && gbps >= 0 && latency_us >= 0;
    RG_CHECK(ok, "mnist", "--simulate-network '", c.simulate_network,
             "' is not 'GBPS,LATENCY_US' with GBPS >= 0 and LATENCY_US >= 0 (e.g. 0.5,100)");
    c.simulated_network = std::pair{gbps, latency_us};
  }
}

std::optional<int> parse_flags(int argc, const char* const* argv, Config& c) {
  CLI::App app{"Train an MLP or CNN on Fashion-MNIST (MNIST-format IDX files) with ringgrad"};
  add_flags(app, c);
  return flags::parse_command_line(app, argc, argv);
}

}  // namespace mnist
