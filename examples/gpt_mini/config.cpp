#include "examples/gpt_mini/config.h"

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "examples/common/comm_hook.h"
#include "examples/common/example_flags.h"

namespace gpt_mini {

using namespace ringgrad;

void add_flags(CLI::App& app, Config& c) {
  const auto count = [](int64_t lo) { return flags::int_in(lo, 1'000'000'000); };
  app.add_option("--data", c.data, "a text file, or a folder of fortune files (default: the fortunes corpus)")
      ->check(flags::non_empty);
  app.add_option("--max-steps", c.max_steps, "optimizer steps to train to")->check(count(1));
  app.add_option("--lr-decay-steps", c.lr_decay_steps, "cosine decay ends here (default: --max-steps)")
      ->check(count(1));
  app.add_option("--warmup", c.warmup, "linear warm-up steps")->check(count(0));
  app.add_option("--batch-size", c.batch_size, "sequences per rank per micro-batch")->check(flags::int_in(1, 1 << 16));
  app.add_option("--block-size", c.block_size, "context length")->check(flags::int_in(1, 1 << 16));
  app.add_option("--n-layer", c.n_layer, "transformer blocks")->check(flags::int_in(1, 1024));
  app.add_option("--n-head", c.n_head, "attention heads")->check(flags::int_in(1, 1024));
  app.add_option("--n-embd", c.n_embd, "model width (a multiple of --n-head)")->check(flags::int_in(1, 1 << 16));
  app.add_option("--lr", c.lr, "peak learning rate")->check(flags::finite_in(0, 1e3));
  app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine")->check(flags::finite_in(0, 1e3));
  app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay (matrices only)")
      ->check(flags::finite_in(0, 1e3));
  app.add_option("--clip", c.clip, "global gradient-norm clip")->check(flags::finite_in(0, 1e9, true));
  app.add_option("--precision", c.precision, "fp32, fp16 or bf16 parameters (f32 master weights)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--threads", c.threads, "compute threads per rank (default: cores / ranks)")
      ->check(flags::thread_count());
  app.add_option("--device", c.device, "cpu, cuda (under mpirun: the local rank's GPU) or cuda:N")
      ->check(flags::non_empty);
  app.add_option("--accum", c.accum, "micro-batches per step (no_sync)")->check(flags::int_in(1, 1 << 20));
  app.add_option("--eval-every", c.eval_every, "validation loss every N steps (0: only at the end)")->check(count(0));
  app.add_option("--eval-batches", c.eval_batches, "validation batches per evaluation")
      ->check(flags::int_in(1, 1 << 20));
  examples::add_log_dir_flags(app, c.log_dir, c.log_all_ranks);
  examples::add_profile_flag(app, c.profile);
  app.add_option("--log-every", c.log_every, "progress line every N steps")->check(count(1));
  app.add_option("--checkpoint", c.checkpoint, "write a checkpoint here at the end (and every --checkpoint-every)")
      ->check(flags::non_empty);
  app.add_option("--checkpoint-every", c.checkpoint_every, "also every N steps (0: only at the end)")->check(count(0));
  app.add_option("--resume", c.resume, "continue from (or, with --generate, sample from) this checkpoint")
      ->check(flags::non_empty);
  app.add_flag("--generate", c.generate, "print text sampled from --resume's model and exit");
  app.add_option("--export", c.export_path,
                 "after training, write the model's weights to this .safetensors file (PyTorch, Hugging Face; "
                 "docs/interop.md)")
      ->check(flags::non_empty);
  app.add_option("--init-from", c.init_from,
                 "start from the weights of this .safetensors file (an --export) instead of random ones; the "
                 "optimizer starts fresh")
      ->check(flags::non_empty);
  app.add_option("--prompt", c.prompt, "text to continue (not empty)")->check(flags::non_empty);
  app.add_option("--num-chars", c.num_chars, "characters to generate")->check(flags::int_in(0, 1 << 24));
  app.add_option("--temperature", c.temperature, "sampling temperature")->check(flags::finite_in(0, 1e6, true));
  app.add_option("--top-k", c.top_k, "sample among the k most likely characters (0: all)")
      ->check(flags::int_in(0, 256));
  app.add_option("--seed", c.seed, "seed for initialisation, data windows and sampling");
  app.add_option("--backend", c.backend, "process group backend: auto, ring, tree, mpi, hierarchical, nccl")
      ->check(CLI::IsMember({"auto", "ring", "tree", "mpi", "hierarchical", "nccl"}));
  app.add_option("--bucket-mb", c.bucket_mb, "DDP bucket size cap in MiB")->check(flags::finite_in(0, 1 << 20, true));
  app.add_option("--first-bucket-mb", c.first_bucket_mb,
                 "cap of the first bucket (the last layers' gradients), which DDP keeps small so that "
                 "communication starts early")
      ->check(flags::finite_in(0, 1 << 20, true));
  examples::add_comm_hook_flags(app, c.comm_hook, c.powersgd);
  flags::add_zero_flags(app, c.zero, c.memory_report);
  app.add_flag("--checkpoint-activations", c.checkpoint_activations,
               "keep only each transformer block's input in forward and recompute the block in backward: its "
               "activations' memory for one more forward per block (autograd/activation_checkpoint.h)");
}

void finish(Config& c) {
  if (c.lr_decay_steps <= 0) c.lr_decay_steps = c.max_steps;
  RG_CHECK(c.n_embd % c.n_head == 0, "gpt_mini", "--n-embd ", c.n_embd, " is not a multiple of --n-head ", c.n_head);
  RG_CHECK(c.batch_size * c.block_size <= kMaxTokensPerMicroBatch, "gpt_mini", "--batch-size ", c.batch_size,
           " x --block-size ", c.block_size, " = ", c.batch_size * c.block_size,
           " tokens per micro-batch exceeds the bound of ", kMaxTokensPerMicroBatch);
  // Checked as a double: 12 x 1024 x 65536^2 does not fit an int64.
  const double parameters =
      12.0 * static_cast<double>(c.n_layer) * static_cast<double>(c.n_embd) * static_cast<double>(c.n_embd);
  RG_CHECK(parameters <= static_cast<double>(kMaxParameters), "gpt_mini", "--n-layer ", c.n_layer, " x --n-embd ",
           c.n_embd, " makes about ", parameters, " parameters (12 x layers x width^2), above the bound of ",
           kMaxParameters);
  examples::zero_reduce_scatter_wire("gpt_mini", c.comm_hook, c.zero);  // refuses what stage 2 cannot carry
  RG_CHECK(c.min_lr <= c.lr, "gpt_mini", "--min-lr ", c.min_lr, " is above the peak --lr ", c.lr);
  RG_CHECK(!c.generate || (c.export_path.empty() && c.init_from.empty() && c.log_dir.empty() && !c.profile), "gpt_mini",
           "--generate samples from --resume's model and trains nothing: --export, --init-from, --log-dir and "
           "--profile do not apply");
  RG_CHECK(c.init_from.empty() || c.resume.empty(), "gpt_mini",
           "--init-from and --resume both set the weights: give one (--resume also restores the optimizer)");
}

std::optional<int> parse_flags(int argc, const char* const* argv, Config& c) {
  CLI::App app{"Train a GPT-2-architecture character model (GPT-mini) with ringgrad"};
  add_flags(app, c);
  return flags::parse_command_line(app, argc, argv);
}

}  // namespace gpt_mini
