// examples/gpt_mini: a GPT-2-architecture character model on the fortunes corpus, one process or
// data parallel across ranks, with checkpoints, exact resume and sampling.
//
//   build/examples/gpt_mini                                   # W3: 4 layers, 4 heads, 128 wide, block 128
//   mpirun -np 2 build/examples/gpt_mini --max-steps 500      # data parallel, global batch 2 x 16
//   build/examples/gpt_mini --checkpoint gpt.ck --max-steps 3000
//   build/examples/gpt_mini --resume gpt.ck --max-steps 4000  # continues exactly
//   build/examples/gpt_mini --generate --resume gpt.ck --prompt "Q: " --temperature 0.8 --top-k 20
//   build/examples/gpt_mini --device cuda --precision bf16    # on the GPU
//   mpirun -np 2 build/examples/gpt_mini --zero 2 --precision fp16 --memory-report   # ZeRO-2
//
// Recipe (../shared/WORKLOADS.md W3): AdamW (betas 0.9 / 0.95, weight decay 0.1 on matrices only),
// linear warm-up to the peak lr then cosine decay to --min-lr at --lr-decay-steps, global-norm
// clipping at 1.0. Every rank draws its own random windows (data::WindowSampler: a pure function of
// seed, epoch, step and rank, so a resumed run continues the same stream); DDP averages gradients.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>

#include <ringgrad.h>

#include "examples/common/comm_hook.h"
#include "examples/common/command_line.h"
#include "examples/common/fingerprint.h"
#include "examples/common/run_log.h"
#include "examples/common/zero.h"
#include "examples/gpt_mini/activation_model.h"
#include "examples/gpt_mini/config.h"

using namespace ringgrad;
using Clock = std::chrono::steady_clock;

namespace {

using gpt_mini::Config;

bool g_speaks = true;  // rank 0 logs
template <class... Args>
void log(const char* format, Args... args) {
  if (!g_speaks) return;
  if constexpr (sizeof...(Args) == 0) std::fputs(format, stdout);
  else std::printf(format, args...);
  std::fflush(stdout);
}

DType precision_dtype(const std::string& p) {
  if (p == "fp16") return DType::f16;
  if (p == "bf16") return DType::bf16;
  RG_CHECK(p == "fp32", "gpt_mini", "unknown --precision '", p, "' (fp32, fp16, bf16)");
  return DType::f32;
}

nn::GPTConfig config_from(const Config& c, int64_t vocab_size) {
  return nn::GPTConfig{.vocab_size = vocab_size,
                       .block_size = c.block_size,
                       .n_layer = c.n_layer,
                       .n_head = c.n_head,
                       .n_embd = c.n_embd};
}

// Weight decay on matrices (Linear weights, embeddings) only, not on biases and LayerNorm
// parameters: decaying a gain towards 0 or a bias towards 0 is not regularisation.
std::vector<optim::ParamGroup> param_groups(nn::Module& model, double lr, double weight_decay) {
  optim::ParamGroup decay{{}, lr, weight_decay}, no_decay{{}, lr, 0.0};
  for (const auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

// Mean validation loss over the same eval_batches windows every time, averaged over ranks.
double evaluate(nn::GPT& model, const std::vector<int64_t>& val, const Config& c, Device device,
                dist::ProcessGroup& group) {
  NoGradGuard no_grad;
  data::WindowSampler sampler(static_cast<int64_t>(val.size()), c.block_size,
                              {.num_replicas = group.size(), .rank = group.rank(), .seed = c.seed + 1000});
  double total = 0;
  for (int64_t i = 0; i < c.eval_batches; ++i) {
    auto [x, y] = data::window_batch(val, sampler.offsets(i, c.batch_size), c.block_size);
    Tensor logits = model(x.to(device)).to(DType::f32);  // through the hooks: ZeRO-3 gathers unit by unit
    total += cross_entropy(logits.reshape({c.batch_size * c.block_size, -1}), y.to(device).reshape({-1})).item();
  }
  Tensor mean = full({1}, total / static_cast<double>(c.eval_batches), {.dtype = DType::f64});
  group.allreduce(mean, dist::ReduceOp::avg)->wait();
  return mean.item();
}

// Autoregressive sampling: softmax(logits / temperature) over the top-k tokens, one token at a time,
// the context cropped to the last block_size tokens. Deterministic for a seed.
// --prompt as token ids (an error when the vocabulary lacks one of its characters).
std::vector<int64_t> sample_prompt_ids(const data::CharVocab& vocab, const Config& c) {
  try {
    return vocab.encode(c.prompt);
  } catch (const Error& e) {
    RG_FAIL("gpt_mini", "--prompt holds a character the model never saw: ", e.what());
  }
}

std::string sample(nn::GPT& model, const data::CharVocab& vocab, const Config& c, Device device) {
  NoGradGuard no_grad;
  model.eval();
  Generator gen(c.seed);
  std::vector<int64_t> ids = sample_prompt_ids(vocab, c);
  const int64_t V = vocab.size(), block = model.config().block_size;
  for (int64_t n = 0; n < c.num_chars; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), block);
    Tensor x = from_vector(std::vector<int64_t>(ids.end() - T, ids.end()), {1, T}, {.dtype = DType::i64});
    std::vector<double> logits =
        model.forward(x.to(device)).to(DType::f64).narrow(1, T - 1, 1).reshape({V}).to_vector();
    for (double& l : logits) l /= std::max(c.temperature, 1e-6);
    if (c.top_k > 0 && c.top_k < V) {
      std::vector<double> sorted = logits;
      std::nth_element(sorted.begin(), sorted.begin() + (c.top_k - 1), sorted.end(), std::greater<>());
      const double kth = sorted[static_cast<size_t>(c.top_k - 1)];
      for (double& l : logits)
        if (l < kth) l = -INFINITY;
    }
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double& l : logits) sum += (l = std::exp(l - max));
    double u = rand({1}, gen, {.dtype = DType::f64}).item() * sum;
    int64_t next = V - 1;
    for (int64_t v = 0; v < V; ++v) {
      if ((u -= logits[static_cast<size_t>(v)]) < 0) {
        next = v;
        break;
      }
    }
    ids.push_back(next);
  }
  return vocab.decode(ids);
}

// --generate: the configuration and vocabulary are the checkpoint's metadata, the weights its
// "model"; rank 0 prints a sample.
int generate_from_checkpoint(Config& c, const dist::World& world, DType dtype) {
  RG_CHECK(!c.resume.empty(), "gpt_mini", "--generate needs --resume CHECKPOINT");
  // The configuration and vocabulary are the checkpoint's metadata; the weights its "model".
  const auto meta = optim::checkpoint_metadata(c.resume);
  // A checkpoint of another program, or of an older gpt_mini, lacks these: say which and where.
  auto meta_value = [&]<class T>(const char* key, const T*) -> T {
    const auto it = meta.find(key);
    RG_CHECK(it != meta.end(), "gpt_mini", "--generate: ", c.resume, " has no metadata '", key,
             "' (not a checkpoint written by gpt_mini?)");
    const T* value = std::get_if<T>(&it->second);
    RG_CHECK(value != nullptr, "gpt_mini", "--generate: metadata '", key, "' of ", c.resume, " has the wrong type");
    return *value;
  };
  auto meta_int = [&](const char* key) {
    const int64_t v = meta_value(key, static_cast<const int64_t*>(nullptr));
    RG_CHECK(v >= 1 && v <= (1 << 16), "gpt_mini", "--generate: metadata '", key, "' of ", c.resume, " is ", v,
             ", not in [1, 65536]");
    return v;
  };
  data::CharVocab vocab(meta_value("vocab", static_cast<const std::string*>(nullptr)));
  c.block_size = meta_int("block_size");
  c.n_layer = meta_int("n_layer");
  c.n_head = meta_int("n_head");
  c.n_embd = meta_int("n_embd");
  gpt_mini::finish(c);  // the checkpoint's shape passes the same checks as the flags
  nn::GPT model(config_from(c, vocab.size()));
  const Device device = parse_device(c.device, world.local_rank);
  model.to(dtype);
  model.to(device);
  optim::TrainingCheckpoint weights;
  weights.add("model", model);
  weights.load(c.resume, {.strict = false, .random_state = false});  // the optimizer's state is not needed
  if (world.rank == 0) std::printf("%s\n", sample(model, vocab, c, device).c_str());
  return 0;
}

// Flags that must match on every rank (they differ only under an MPMD launch): see mnist.
void check_same_flags(dist::ProcessGroup& group, const Config& c, Device device) {
  dist::check_same_settings(group, "gpt_mini's flags",
                            {{"--device (kind)", device.kind()},
                             {"--max-steps", std::to_string(c.max_steps)},
                             {"--lr-decay-steps", std::to_string(c.lr_decay_steps)},
                             {"--warmup", std::to_string(c.warmup)},
                             {"--batch-size", std::to_string(c.batch_size)},
                             {"--block-size", std::to_string(c.block_size)},
                             {"--n-layer", std::to_string(c.n_layer)},
                             {"--n-head", std::to_string(c.n_head)},
                             {"--n-embd", std::to_string(c.n_embd)},
                             {"--lr", str_cat(c.lr)},
                             {"--min-lr", str_cat(c.min_lr)},
                             {"--weight-decay", str_cat(c.weight_decay)},
                             {"--clip", str_cat(c.clip)},
                             {"--precision", c.precision},
                             {"--accum", std::to_string(c.accum)},
                             {"--eval-every", std::to_string(c.eval_every)},
                             {"--eval-batches", std::to_string(c.eval_batches)},
                             {"--checkpoint-every", std::to_string(c.checkpoint_every)},
                             {"--checkpoint given", c.checkpoint.empty() ? "no" : "yes"},
                             {"--resume", c.resume},
                             {"--seed", std::to_string(c.seed)},
                             {"--bucket-mb", str_cat(c.bucket_mb)},
                             {"--first-bucket-mb", str_cat(c.first_bucket_mb)},
                             {"--zero", std::to_string(c.zero)},
                             {"--comm-hook", c.comm_hook},
                             {"--powersgd-rank", std::to_string(c.powersgd.rank)},
                             {"--powersgd-start", std::to_string(c.powersgd.start_iteration)}});
}

// What one optimizer step works with.
struct Training {
  const Config& c;
  Device device;
  const std::vector<int64_t>& train;  // the training split's tokens
  data::WindowSampler& sampler;
  dist::DistributedDataParallel& ddp;
  optim::Optimizer& opt;
  optim::GradScaler& scaler;
  nn::Module& model;
  size_t activation_bytes = 0;  // --memory-report: the most a forward left allocated for its backward
};

// One optimizer step over --accum micro-batches: only the last backward synchronises (no_sync
// before it); each loss is scaled by 1/accum. Gradients are clipped to their global norm (a sharded
// optimizer's: over the shards). Returns the step's mean loss on this rank.
double train_step(Training& t, int64_t step) {
  const Config& c = t.c;
  t.opt.zero_grad();
  double step_loss = 0;
  for (int64_t k = 0; k < c.accum; ++k) {
    auto [x, y] = data::window_batch(t.train, t.sampler.offsets(step * c.accum + k, c.batch_size), c.block_size);
    Tensor input = x.to(t.device), target = y.to(t.device).reshape({-1});
    const size_t before_forward = c.memory_report ? memory_stats(t.device).allocated : 0;
    Tensor logits = t.ddp(input).to(DType::f32);
    Tensor loss = cross_entropy(logits.reshape({c.batch_size * c.block_size, -1}), target);
    // Activations: what the forward leaves allocated for its backward (saved tensors, logits).
    if (c.memory_report)
      t.activation_bytes = std::max(t.activation_bytes, memory_stats(t.device).allocated - before_forward);
    Tensor scaled = t.scaler.scale(loss * (1.0 / static_cast<double>(c.accum)));
    if (k + 1 < c.accum) {
      auto no_sync = t.ddp.no_sync();
      scaled.backward();
    } else {
      scaled.backward();
    }
    step_loss += loss.item() / static_cast<double>(c.accum);
  }
  t.scaler.unscale_(t.opt);
  examples::clip_gradients(t.opt, t.model.parameters(), c.clip);  // sharded: the global norm of the shards
  t.scaler.step(t.opt);
  t.scaler.update();
  return step_loss;
}

// The vocabulary's bytes as text a JSON header can hold (it must be UTF-8): byte b as the code
// point U+00bb, Latin-1's reading. ASCII stays as it is.
std::string latin1_to_utf8(const std::string& bytes) {
  std::string out;
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    if (b < 0x80) {
      out += ch;
    } else {
      out += static_cast<char>(0xC0 | (b >> 6));
      out += static_cast<char>(0x80 | (b & 0x3F));
    }
  }
  return out;
}

// --export's metadata: what rebuilds the model from the file alone -- its shape, and the
// vocabulary that gives the token ids their characters (as latin1_to_utf8 writes it).
nn::SafetensorsMetadata export_metadata(const Config& c, const std::string& vocab_chars, int64_t step) {
  return {{"producer", std::string("ringgrad ") + version() + " examples/gpt_mini"},
          {"vocab", latin1_to_utf8(vocab_chars)},
          {"vocab_size", std::to_string(vocab_chars.size())},
          {"block_size", std::to_string(c.block_size)},
          {"n_layer", std::to_string(c.n_layer)},
          {"n_head", std::to_string(c.n_head)},
          {"n_embd", std::to_string(c.n_embd)},
          {"step", std::to_string(step)}};
}

// --init-from: the weights of a .safetensors file. Refused unless the file's model is this run's
// (the shapes; the heads, which no shape shows) and its vocabulary this corpus's, else the same ids
// would mean other characters.
void init_from(nn::GPT& model, const Config& c, const std::string& vocab_chars) {
  const nn::SafetensorsFile file = nn::read_safetensors(c.init_from);
  for (const auto& [key, value] : file.metadata) {
    RG_CHECK(key != "n_head" || value == std::to_string(c.n_head), "gpt_mini", "--init-from ", c.init_from, " has ",
             value, " heads, this run --n-head ", c.n_head);
    RG_CHECK(key != "vocab" || value == latin1_to_utf8(vocab_chars), "gpt_mini", "--init-from ", c.init_from,
             ": its vocabulary is not this corpus's (", vocab_chars.size(), " characters)");
  }
  const LoadResult result = model.load_state_dict(file.tensors, /*strict=*/false);
  RG_CHECK(result.all_matched(), "gpt_mini", "--init-from ", c.init_from, " does not fit this model (--n-layer ",
           c.n_layer, " --n-embd ", c.n_embd, " --block-size ", c.block_size, "): ", result.describe());
}

int run(Config& c, const dist::World& world) {
  if (c.threads > 0) set_num_threads(c.threads);
  const DType dtype = precision_dtype(c.precision);

  if (c.generate) return generate_from_checkpoint(c, world, dtype);

  // ---- data ----
  const bool is_dir = std::filesystem::is_directory(c.data);
  data::TextCorpus corpus = is_dir ? data::load_fortunes(c.data) : data::load_text_file(c.data);
  data::CharVocab vocab(corpus.text);
  auto [train, val] = data::split_tokens(vocab.encode(corpus.text), 0.9);
  RG_CHECK(static_cast<int64_t>(val.size()) > c.block_size, "gpt_mini", "the validation split (", val.size(),
           " characters) is shorter than one window (", c.block_size + 1,
           "): use a longer text or a smaller --block-size");
  data::WindowSampler sampler(static_cast<int64_t>(train.size()), c.block_size,
                              {.num_replicas = world.size, .rank = world.rank, .seed = c.seed});
  log("data: %s: %zu characters in %zu file(s), vocabulary %lld, train %zu / validation %zu\n", c.data.c_str(),
      corpus.text.size(), corpus.files.size(), (long long)vocab.size(), train.size(), val.size());

  // ---- model, optimizer, DDP ----
  Generator init_gen(c.seed);
  auto model = std::make_shared<nn::GPT>(config_from(c, vocab.size()), &init_gen);
  std::string vocab_chars;
  for (int64_t i = 0; i < vocab.size(); ++i) vocab_chars += vocab.decode({i});
  if (!c.init_from.empty()) init_from(*model, c, vocab_chars);
  if (c.checkpoint_activations)
    for (const auto& block : *model->h) block->checkpoint_activations();
  const Device device = parse_device(c.device, world.local_rank);  // batches are copied there per step
  model->to(dtype);
  model->to(device);
  optim::GradScaler scaler({.enabled = dtype == DType::f16});
  optim::WarmupCosineLR schedule(c.lr, c.warmup, c.lr_decay_steps, c.min_lr);
  int64_t step = 0;
  auto group = dist::new_group(c.backend);
  check_same_flags(*group, c, device);
  const dist::NamedCommHook comm_hook =
      dist::make_comm_hook(examples::ddp_comm_hook_name(c.comm_hook, c.zero), c.powersgd);
  dist::DistributedDataParallel ddp(
      model, group, {.bucket_cap_mb = c.bucket_mb, .first_bucket_mb = c.first_bucket_mb, .comm_hook = comm_hook.hook});
  // --zero 1/2/3: each rank keeps 1/N of AdamW's state (2: and of the reduced gradient; 3: and of the
  // parameters, each block gathered for its forward and backward).
  const optim::AdamWOptions adamw{.lr = c.lr, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = c.weight_decay};
  auto opt = examples::plain_or_sharded(
      c.zero, ddp, param_groups(*model, c.lr, c.weight_decay),
      [&adamw](std::vector<optim::ParamGroup> groups) {
        return std::make_unique<optim::AdamW>(std::move(groups), adamw);
      },
      examples::zero_reduce_scatter_wire("gpt_mini", c.comm_hook, c.zero));
  dist::ZeroOptimizer* sharded = examples::as_sharded(*opt);
  dist::sync_found_inf(scaler, group);
  // The training state, in one file: rank 0 writes it; every rank reads it on --resume. The
  // sampler needs no state: its windows are a function of (seed, step). The metadata lets
  // --generate rebuild the model from the file alone.
  int64_t next_step = 0;  // a resumed run starts here
  optim::TrainingCheckpoint checkpoint;
  checkpoint.add("model", *model).add("scaler", scaler).add("step", next_step);
  // A sharded optimizer saves its shards into <checkpoint>.zero/ (docs/zero.md), at any world size.
  if (sharded == nullptr) checkpoint.add_optimizer("optimizer", *opt, *model);
  // A compressing hook's state (residuals, PowerSGD's Qs) differs by rank: gathered before each save.
  std::optional<dist::CommHookCheckpoint> hook_state;
  if (comm_hook.state != nullptr) checkpoint.add("comm_hook", hook_state.emplace(comm_hook.state, group));
  checkpoint.metadata = {{"vocab", vocab_chars},
                         {"block_size", c.block_size},
                         {"n_layer", c.n_layer},
                         {"n_head", c.n_head},
                         {"n_embd", c.n_embd}};
  dist::sync_checkpoint(checkpoint, group);
  // A destination that cannot be written is found now, not after an epoch of training.
  if (!c.checkpoint.empty()) checkpoint.check_destination(c.checkpoint);
  if (!c.export_path.empty() && world.rank == 0) nn::check_checkpoint_destination(c.export_path);
  if (!c.resume.empty()) {
    {
      auto whole = examples::whole_model(*opt, /*write_back=*/true);  // ZeRO-3: the loaded weights into the shards
      log("%s\n", checkpoint.load(c.resume).describe().c_str());
    }
    if (sharded != nullptr) sharded->load_sharded(examples::shard_folder(c.resume), examples::zero_save_id(checkpoint));
    step = next_step;
  }
  log("model: GPT %lld layers, %lld heads, %lld wide, block %lld: %lld parameters, %s on %s\n", (long long)c.n_layer,
      (long long)c.n_head, (long long)c.n_embd, (long long)c.block_size, (long long)model->parameter_count(),
      c.precision.c_str(), device.str().c_str());
  const std::string cpu_kernels = cpu_kernels_description();  // ISA, and whether bf16 uses AVX512_BF16
  log("training: %d rank(s) x %lld threads (CPU kernels: %s), batch %lld per rank x %lld accumulation = %lld "
      "sequences (%lld tokens) per step; lr %g peak, warm-up %lld, cosine to %g at step %lld\n",
      world.size, (long long)num_threads(), cpu_kernels.c_str(), (long long)c.batch_size, (long long)c.accum,
      (long long)(c.batch_size * c.accum * world.size), (long long)(c.batch_size * c.accum * world.size * c.block_size),
      c.lr, (long long)c.warmup, c.min_lr, (long long)c.lr_decay_steps);

  auto save = [&](int64_t resume_at) {
    if (c.checkpoint.empty()) return;
    next_step = resume_at;
    // The shards first, their save's id in the checkpoint: a crash between the two leaves a
    // checkpoint naming shards that are still there (the previous save's are kept).
    if (sharded != nullptr)
      checkpoint.metadata["zero_save_id"] = sharded->save_sharded(examples::shard_folder(c.checkpoint));
    if (hook_state) hook_state->gather();  // collective
    auto whole = examples::whole_model(*opt);
    checkpoint.save(c.checkpoint);  // every rank calls it; rank 0 writes
  };

  // ---- training ----
  const int64_t tokens_per_step = c.batch_size * c.accum * world.size * c.block_size;
  const size_t allocated_before = memory_stats(device).allocated;  // --memory-report
  reset_peak_memory_stats(device);
  Training training{c, device, train, sampler, ddp, *opt, scaler, *model};
  examples::RunLog run_log(c.log_dir, world.rank, c.log_all_ranks);
  // --log-dir samples text from --prompt at each evaluation: a prompt the vocabulary cannot encode
  // is refused now, not after the first stretch of training.
  if (run_log) (void)sample_prompt_ids(vocab, c);
  auto t_start = Clock::now();
  double logged_seconds = 0;  // --log-dir: the training time and steps at the last logging point
  int64_t logged_steps = 0;
  double paused = 0;  // seconds spent evaluating and sampling, not training
  int64_t steps_run = 0;
  double loss_value = 0;
  if (c.profile) profiler::enable();  // the training steps: evaluations and checkpoints pause it
  for (; step < c.max_steps; ++step) {
    opt->set_lr(schedule.at(step));
    sampler.set_epoch(step * tokens_per_step / static_cast<int64_t>(train.size()));
    loss_value = train_step(training, step);
    ++steps_run;
    const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
    if ((step + 1) % c.log_every == 0 || step + 1 == c.max_steps) {
      const double tps = static_cast<double>(steps_run * tokens_per_step) / seconds;
      log("step %lld/%lld  loss (rank 0) %.4f  lr %.2e  %.0f tokens/s  ETA %.0f s\n", (long long)(step + 1),
          (long long)c.max_steps, loss_value, opt->lr(), tps,
          static_cast<double>(c.max_steps - step - 1) * static_cast<double>(tokens_per_step) / tps);
      // Since the last point, without the evaluations between (their time is in `paused`).
      const double interval = seconds - paused - logged_seconds;
      const auto steps = static_cast<double>(steps_run - logged_steps);
      run_log.training_step(step + 1, loss_value, opt->lr(), "tokens_per_s",
                            steps * static_cast<double>(tokens_per_step) / interval, 1e3 * interval / steps,
                            ddp.stats(), device, scaler);
      logged_seconds = seconds - paused;
      logged_steps = steps_run;
    }
    if (c.eval_every > 0 && ((step + 1) % c.eval_every == 0 || step + 1 == c.max_steps)) {
      const profiler::PauseGuard not_training;
      const auto t_eval = Clock::now();
      const double val_loss = evaluate(*model, val, c, device, *group);
      log("step %lld: validation loss %.4f\n", (long long)(step + 1), val_loss);
      run_log.scalar("val/loss", val_loss, step + 1);
      // Text from --prompt, as --generate samples it. Not under ZeRO-3: a forward there gathers
      // the parameters on every rank, and only rank 0 logs.
      if (run_log && c.zero < 3) {
        run_log.text("samples", latin1_to_utf8(sample(*model, vocab, c, device)), step + 1);  // text is UTF-8
        model->train();
      }
      paused += std::chrono::duration<double>(Clock::now() - t_eval).count();
    }
    if (c.checkpoint_every > 0 && (step + 1) % c.checkpoint_every == 0) {
      const profiler::PauseGuard not_training;
      save(step + 1);
    }
  }
  profiler::disable();
  const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  log("done: %lld steps in %.1f s, %.0f tokens/s (all ranks)\n", (long long)steps_run, seconds,
      static_cast<double>(steps_run * tokens_per_step) / std::max(seconds, 1e-9));
  log("%s\n%s%s", ddp.stats().summary().c_str(), examples::gather_summary(*opt, ddp.stats().steps).c_str(),
      examples::comm_hook_summary(c.comm_hook, comm_hook.state.get(), ddp.stats().steps).c_str());
  if (c.profile)
    log("ops of rank 0's training steps (--profile%s):\n%s",
        device.is_cuda() ? "; on the GPU these are the host's times, launches rather than kernels" : "",
        profiler::format_table(profiler::op_table(), steps_run).c_str());
  if (c.memory_report)
    log("%s\n",
        examples::memory_report(
            *model, *opt, ddp, device, allocated_before,
            {.activation_bytes = training.activation_bytes,
             .activation_note = c.checkpoint_activations ? "each block's input; its activations recomputed in backward"
                                                         : "every block's saved tensors",
             .modelled_bytes = examples::modelled_activation_bytes(model->config(), c.batch_size, dtype, device,
                                                                   c.checkpoint_activations)},
            comm_hook.state.get())
            .c_str());
  const examples::ParameterFingerprint fingerprint = [&] {
    auto whole = examples::whole_model(*opt);
    return examples::parameter_fingerprint(*model);
  }();
  log("final loss %.17g, parameter checksum %.17g, norm %.17g\n", loss_value, fingerprint.checksum, fingerprint.norm);
  save(step);
  if (!c.export_path.empty()) {
    auto whole = examples::whole_model(*opt);  // ZeRO-3: every rank gathers the parameters
    if (world.rank == 0) {
      nn::save_safetensors(c.export_path, model->state_dict(), export_metadata(c, vocab_chars, step));
      log("exported the weights to %s (safetensors; docs/interop.md)\n", c.export_path.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (const auto code = gpt_mini::parse_flags(argc, argv, c)) return *code;  // before MPI starts
  const dist::World world = dist::init(&argc, &argv);
  g_speaks = world.rank == 0;
  // A failed rank must not leave the others waiting in a collective: run_or_abort ends the job.
  return dist::run_or_abort([&] {
    gpt_mini::finish(c);
    return run(c, world);
  });
}
