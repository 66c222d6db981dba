// gpt_train: training throughput of W3 (GPT-mini on the fortunes corpus), one process or data
// parallel -- the ringgrad side of bench/run.sh's W3 rows (../shared/WORKLOADS.md).
//
//   build/bench/gpt_train --threads 1                 # variant (a)
//   build/bench/gpt_train --threads 2                 # variant (b)
//   mpirun -np 2 build/bench/gpt_train --threads 1    # variant (c)
//   ... --checkpoint-activations 1                    # each block recomputed in backward
//
// W3: n_layer 4, n_head 4, n_embd 128, block 128, batch 16 per rank, no dropout, AdamW (lr 3e-4,
// betas 0.9 / 0.95, weight decay 0.1 on matrices only). The corpus is read and encoded before the
// clock starts; each step draws this rank's random windows (data::WindowSampler), runs forward,
// cross-entropy, backward (with 2+ ranks DDP averages the gradients) and the AdamW step. --warmup
// steps are untimed, then --steps are timed between two barriers. One line per run for the driver:
//   RESULT impl=ringgrad model=gpt ranks=2 threads=1 batch=16 steps=200 tokens_per_s=... overlap=...
#include <cstdio>
#include <string>

#include <ringgrad.h>

#include "bench/train_bench.h"

using namespace ringgrad;

int main(int argc, char** argv) {
  bench::TrainFlags flags;  // W3's defaults:
  flags.data = "/usr/share/games/fortunes";
  flags.batch = 16;
  if (const auto code = bench::parse_train_flags(argc, argv, flags, {"--block", "--checkpoint-activations"},
                                                 "W3 (GPT-mini) training throughput, one process or data parallel"))
    return *code;
  const int batch = flags.batch, block = flags.block;
  try {
    const dist::World w = dist::init(&argc, &argv);
    set_num_threads(flags.threads);
    double tokens_per_s = 0, overlap = 0;
    {
      const data::TextCorpus corpus = data::load_fortunes(flags.data);
      const data::CharVocab vocab(corpus.text);
      const std::vector<int64_t> train = data::split_tokens(vocab.encode(corpus.text), 0.9).first;
      data::WindowSampler sampler(static_cast<int64_t>(train.size()), block,
                                  {.num_replicas = w.size, .rank = w.rank, .seed = 1});

      Generator init_gen(1);
      auto model = std::make_shared<nn::GPT>(
          nn::GPTConfig{.vocab_size = vocab.size(), .block_size = block, .n_layer = 4, .n_head = 4, .n_embd = 128},
          &init_gen);
      if (flags.checkpoint_activations)  // each block recomputed in backward (autograd/activation_checkpoint.h)
        for (const auto& b : *model->h) b->checkpoint_activations();
      model->to(bench::precision_dtype(flags));  // bf16: AdamW keeps f32 master weights and moments
      optim::ParamGroup decay{{}, 3e-4, 0.1}, no_decay{{}, 3e-4, 0.0};
      for (const auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
      auto group = dist::new_group(flags.backend);
      // One process trains the plain model, as the PyTorch peer does; from 2 ranks on, DDP.
      std::unique_ptr<dist::DistributedDataParallel> ddp;
      dist::DDPOptions ddp_options;
      ddp_options.bucket_cap_mb = flags.bucket_mb;
      ddp_options.first_bucket_mb = flags.first_bucket_mb;
      ddp_options.comm_hook =
          dist::make_comm_hook(flags.comm_hook, {.rank = flags.powersgd_rank, .start_iteration = flags.powersgd_start})
              .hook;
      ddp_options.trace = !flags.trace.empty();
      if (w.size > 1 || flags.zero > 0)
        ddp = std::make_unique<dist::DistributedDataParallel>(model, group, ddp_options);
      const optim::AdamWOptions adamw{.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1};
      auto make_adamw = [&adamw](std::vector<optim::ParamGroup> g) {
        return std::unique_ptr<optim::Optimizer>(std::make_unique<optim::AdamW>(std::move(g), adamw));
      };
      std::unique_ptr<optim::Optimizer> opt =
          flags.zero > 0 ? std::make_unique<dist::ZeroOptimizer>(
                               *ddp, std::vector<optim::ParamGroup>{decay, no_decay}, make_adamw,
                               dist::ZeroOptions{.stage = flags.zero, .staging_mb = flags.staging_mb, .units = {}})
                         : make_adamw({decay, no_decay});

      int64_t step_index = 0;
      auto step = [&] {
        auto [x, y] = data::window_batch(train, sampler.offsets(step_index++, batch), block);  // (B, T) each
        opt->zero_grad();
        Tensor logits = ddp ? ddp->forward(x) : model->forward(x);  // (B, T, V)
        cross_entropy(logits.reshape({batch * block, -1}), y.reshape({-1})).backward();
        opt->step();
      };
      const double seconds = bench::time_steps(step, flags, *group, ddp.get());
      if (ddp && !flags.trace.empty()) ddp->write_trace(flags.trace);  // collective
      tokens_per_s = static_cast<double>(flags.steps) * batch * block * w.size / seconds;
      overlap = bench::report_overlap(ddp.get(), w.rank);
    }
    if (w.rank == 0)
      std::printf(
          "RESULT impl=ringgrad model=gpt ranks=%d threads=%d batch=%d steps=%d precision=%s zero=%d checkpoint=%d "
          "tokens_per_s=%.1f overlap=%.0f\n",
          w.size, flags.threads, batch, flags.steps, flags.precision.c_str(), flags.zero,
          flags.checkpoint_activations ? 1 : 0, tokens_per_s, overlap);
    dist::finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_train: %s\n", e.what());
    return 1;
  }
}
