// examples/mnist: trains an MLP, a CNN or a small ResNet on Fashion-MNIST (or any MNIST-format IDX folder), on one
// process or data-parallel across ranks.
//
//   build/examples/mnist                       # MLP, 1 epoch, SGD momentum 0.9, lr 0.05, batch 128
//   mpirun -np 2 build/examples/mnist          # the same on 2 ranks: global batch 2 x 128
//   build/examples/mnist --model cnn           # CNN, batch 64
//   build/examples/mnist --model resnet        # residual blocks, BatchNorm2d, global pooling, dropout
//   build/examples/mnist --precision fp16      # f16 parameters, f32 master weights, loss scaling
//   build/examples/mnist --accum 4             # 4 micro-batches per optimizer step (no_sync)
//   build/examples/mnist --checkpoint ck.bin   # save at each epoch end (and every --checkpoint-every)
//   build/examples/mnist --resume ck.bin       # continue exactly where ck.bin left off
//   build/examples/mnist --device cuda         # on the GPU (under mpirun: each rank its local GPU)
//   mpirun -np 2 build/examples/mnist --zero 2 --memory-report   # ZeRO: state and gradients sharded
//
// Data parallelism: each rank trains a full replica on its own shard (DistributedSampler, reshuffled
// by set_epoch every epoch); DistributedDataParallel averages the gradients during backward, so the
// replicas take identical steps. Rank 0 logs. See docs/ddp.md.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>

#include "examples/common/comm_hook.h"
#include "examples/common/command_line.h"
#include "examples/common/fingerprint.h"
#include "examples/common/run_log.h"
#include "examples/common/zero.h"
#include "examples/mnist/config.h"
#include "examples/mnist/models.h"

using namespace ringgrad;
using Clock = std::chrono::steady_clock;

namespace {

using mnist::Config;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

DType precision_dtype(const std::string& p) {
  if (p == "fp32") return DType::f32;
  if (p == "fp16") return DType::f16;
  if (p == "bf16") return DType::bf16;
  throw Error("[mnist] unknown --precision '" + p + "' (expected fp32, fp16 or bf16)");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, std::vector<optim::ParamGroup> groups) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions{.lr = c.lr,
                                                                             .momentum = c.momentum,
                                                                             .weight_decay = c.weight_decay});
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(std::move(groups),
                                         optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(std::move(groups),
                                          optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  throw Error("[mnist] unknown --optimizer '" + c.optimizer + "' (expected sgd, adam or adamw)");
}

// Test-set accuracy, without building a graph. Each rank scores its own slice of the test set
// (the replicas are identical), and the counts are summed over ranks.
double evaluate(nn::Module& model, const data::MnistSplit& test, DType dtype, Device device,
                dist::ProcessGroup& group) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t n = test.images.size(0), N = group.size();
  const int64_t begin = n * group.rank() / N, end = n * (group.rank() + 1) / N, batch = 1000;
  int64_t correct = 0;
  for (int64_t at = begin; at < end; at += batch) {
    const int64_t len = std::min(batch, end - at);
    Tensor logits = model(test.images.narrow(0, at, len).to(device).to(dtype));
    correct += nn::F::correct_count(logits, test.labels.narrow(0, at, len).to(device));
  }
  model.train();
  Tensor total = full({1}, static_cast<double>(correct), {.dtype = DType::i64});
  group.allreduce(total)->wait();
  return 100.0 * total.item() / static_cast<double>(n);
}

// printf on rank 0 only: every rank runs the same loop, one of them speaks.
bool g_speaks = true;
template <class... Args>
void log(const char* format, Args... args) {
  if (!g_speaks) return;
  if constexpr (sizeof...(Args) == 0) std::fputs(format, stdout);
  else std::printf(format, args...);
  std::fflush(stdout);
}

// The images, normalised as --input-norm says.
data::Mnist load_data(const Config& c) {
  auto t_load = Clock::now();
  data::Mnist mnist = data::load_mnist(c.data, /*normalize=*/c.input_norm == "standard");
  if (c.input_norm == "half") {
    mnist.train.images = (mnist.train.images - 0.5) * 2.0;
    mnist.test.images = (mnist.test.images - 0.5) * 2.0;
    mnist.mean = mnist.std = 0.5;
  }
  log("data: %s: %lld train, %lld test images (loaded in %.1f s; inputs (p - %.4f) / %.4f)\n", c.data.c_str(),
      (long long)mnist.train.images.size(0), (long long)mnist.test.images.size(0), seconds_since(t_load), mnist.mean,
      mnist.std);
  return mnist;
}

// --export's metadata: what a reader needs to use the weights (the model, the inputs' normalisation
// (pixel / 255 - mean) / std) and what they scored on the test set.
nn::SafetensorsMetadata export_metadata(const Config& c, const data::Mnist& mnist, int64_t step, double accuracy) {
  const auto exactly = [](double v) {  // every digit: a reader normalises its inputs as training did
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    return std::string(text);
  };
  return {{"producer", std::string("ringgrad ") + version() + " examples/mnist"},
          {"model", c.model},
          {"input_mean", exactly(mnist.mean)},
          {"input_std", exactly(mnist.std)},
          {"step", std::to_string(step)},
          {"test_accuracy_percent", exactly(accuracy)}};
}

// Flags that must match on every rank (they differ only under an MPMD launch): a different seed
// would give overlapping shards, a different batch or accumulation a wrong mean or a hang.
void check_same_flags(dist::ProcessGroup& group, const Config& c, Device device) {
  dist::check_same_settings(group, "mnist's flags",
                            {{"--device (kind)", device.kind()},
                             {"--model", c.model},
                             {"--optimizer", c.optimizer},
                             {"--precision", c.precision},
                             {"--epochs", std::to_string(c.epochs)},
                             {"--batch-size", std::to_string(c.batch_size)},
                             {"--lr", str_cat(c.lr)},
                             {"--momentum", str_cat(c.momentum)},
                             {"--weight-decay", str_cat(c.weight_decay)},
                             {"--seed", std::to_string(c.seed)},
                             {"--input-norm", c.input_norm},
                             {"--accum", std::to_string(c.accum)},
                             {"--limit-steps", std::to_string(c.limit_steps)},
                             {"--eval-every", std::to_string(c.eval_every)},
                             {"--checkpoint-every", std::to_string(c.checkpoint_every)},
                             {"--checkpoint given", c.checkpoint.empty() ? "no" : "yes"},
                             {"--resume", c.resume},
                             {"--comm-hook", c.comm_hook},
                             {"--powersgd-rank", std::to_string(c.powersgd.rank)},
                             {"--powersgd-start", std::to_string(c.powersgd.start_iteration)},
                             {"--zero", std::to_string(c.zero)},
                             {"--trace given", c.trace.empty() ? "no" : "yes"}});
}

// What one training step works with.
struct Training {
  const Config& c;
  const dist::World& world;
  Device device;
  DType dtype;
  dist::DistributedDataParallel& ddp;
  optim::Optimizer& opt;
  optim::GradScaler& scaler;
  data::DataLoader& loader;
  int64_t& global_step;
  std::function<void()> save;        // a checkpoint, when --checkpoint asks for one
  std::function<double()> evaluate;  // test accuracy in percent (collective)
  examples::RunLog& run_log;         // --log-dir
  double seconds_trained = 0;        // training time of the epochs before this one (--eval-every)
};

// --log-dir's training figures every this many steps (the test accuracy at each evaluation).
constexpr int64_t kLogDirEvery = 10;

// What one epoch did on this rank.
struct EpochTotals {
  int64_t steps = 0, samples = 0;
  double loss_sum = 0, seconds = 0;  // seconds: training only, --eval-every's evaluations left out
};

// One micro-batch: forward, loss, backward, and the optimizer step when it ends a step. Gradient
// accumulation: micro-batches 1..K-1 of a step only accumulate (no communication); the K-th
// backward averages the sum across ranks once. Each loss is scaled by 1/K so the step equals one
// on a K times larger batch. Returns the (unscaled) loss.
double train_micro_batch(Training& t, const data::Example& batch, int micro, bool last_micro) {
  if (micro == 0) t.opt.zero_grad();
  Tensor logits = t.ddp(batch.input.to(t.device, /*non_blocking=*/true).to(t.dtype));
  Tensor loss = nn::F::cross_entropy(logits, batch.target.to(t.device, /*non_blocking=*/true));
  Tensor scaled = t.scaler.scale(loss * (1.0 / t.c.accum));
  if (last_micro) {
    scaled.backward();
    t.scaler.step(t.opt);
    t.scaler.update();
  } else {
    auto no_sync = t.ddp.no_sync();
    scaled.backward();
  }
  return loss.item();
}

// The rest of one epoch (a resumed pass begins after the batches the checkpoint had taken), with
// progress lines, statistics and checkpoints as the flags ask.
EpochTotals train_epoch(Training& t, int epoch, bool tty) {
  const Config& c = t.c;
  const int64_t steps_per_epoch = t.loader.num_batches();
  auto t_epoch = Clock::now();
  double eval_seconds = 0;  // --eval-every's, not training
  EpochTotals e;
  double logged_seconds = 0;  // --log-dir: the training time, steps and samples at the last point
  int64_t logged_steps = 0, logged_samples = 0;
  for (const data::Example& batch : t.loader) {
    int64_t step_in_epoch = t.loader.batches_taken() - 1;
    const int micro = static_cast<int>(step_in_epoch % c.accum);
    const bool last_micro = micro == c.accum - 1 || step_in_epoch + 1 == steps_per_epoch;
    const double loss_value = train_micro_batch(t, batch, micro, last_micro);
    ++step_in_epoch;
    ++e.steps;
    ++t.global_step;
    e.samples += batch.input.size(0);
    e.loss_sum += loss_value;
    const double elapsed = seconds_since(t_epoch) - eval_seconds;
    const double rate = static_cast<double>(e.samples) / elapsed;  // this rank's
    const double eta = static_cast<double>(steps_per_epoch - step_in_epoch) * c.batch_size / rate;
    if (tty || step_in_epoch % 100 == 0 || step_in_epoch == steps_per_epoch)
      log("%sepoch %d step %lld/%lld  loss (rank 0) %.4f  %.0f samples/s (all ranks)  ETA %.0f s%s", tty ? "\r" : "",
          epoch + 1, (long long)step_in_epoch, (long long)steps_per_epoch, loss_value, rate * t.world.size, eta,
          tty ? "   " : "\n");
    if (t.run_log && t.global_step % kLogDirEvery == 0) {
      const double trained = seconds_since(t_epoch) - eval_seconds;
      const double interval = trained - logged_seconds;  // since the last point, this rank's samples
      t.run_log.training_step(t.global_step, loss_value, t.opt.lr(), "samples_per_s",
                              static_cast<double>(e.samples - logged_samples) / interval * t.world.size,
                              1e3 * interval / static_cast<double>(e.steps - logged_steps), t.ddp.stats(), t.device,
                              t.scaler);
      logged_seconds = trained;
      logged_steps = e.steps;
      logged_samples = e.samples;
    }
    if (c.stats_every > 0 && t.global_step % c.stats_every == 0) log("%s\n", t.ddp.stats().summary().c_str());
    if (c.eval_every > 0 && t.global_step % c.eval_every == 0) {
      // The clock stops while the test set is scored: a time-to-accuracy curve counts training.
      const double trained = t.seconds_trained + seconds_since(t_epoch) - eval_seconds;
      auto t_eval = Clock::now();
      const double accuracy = t.evaluate();
      eval_seconds += seconds_since(t_eval);
      log("eval: step %lld, %.3f s of training, test accuracy %.2f%%\n", (long long)t.global_step, trained, accuracy);
      t.run_log.scalar("eval/test_accuracy", accuracy, t.global_step);
    }
    if (c.checkpoint_every > 0 && t.global_step % c.checkpoint_every == 0) t.save();
    if (c.limit_steps > 0 && t.global_step >= c.limit_steps) break;
  }
  if (tty) log("\n");
  e.seconds = seconds_since(t_epoch) - eval_seconds;
  return e;
}

// The whole training run. Every object that holds a process group lives in here, so that all of
// them are gone before main calls dist::finalize.
int run(Config& c, const dist::World& world) {
  if (c.threads > 0) set_num_threads(c.threads);
  manual_seed(c.seed);
  const DType dtype = precision_dtype(c.precision);

  // A malformed --resume file is refused now, before seconds of data loading, not after them.
  if (!c.resume.empty()) (void)optim::checkpoint_metadata(c.resume);
  data::Mnist mnist = load_data(c);
  auto train = std::make_shared<data::TensorDataset>(mnist.train.images, mnist.train.labels);

  // The model lives on one device; each batch is copied there as it is used. For a GPU the loader
  // pins its batches, so that copy is asynchronous (queued before the forward's kernels).
  const Device device = parse_device(c.device, world.local_rank);
  auto model = mnist::make_model(c.model);
  model->to(dtype);
  model->to(device);
  dist::GroupOptions group_options;
  if (c.simulated_network)
    group_options.simulated_network = dist::SimulatedNetwork{c.simulated_network->first, c.simulated_network->second};
  auto group = dist::new_group(c.backend, group_options);
  check_same_flags(*group, c, device);
  // Wrapping checks that every rank built the same model and copies rank 0's weights everywhere.
  const dist::NamedCommHook comm_hook =
      dist::make_comm_hook(examples::ddp_comm_hook_name(c.comm_hook, c.zero), c.powersgd);
  dist::DistributedDataParallel ddp(
      model, group, {.bucket_cap_mb = c.bucket_mb, .comm_hook = comm_hook.hook, .trace = !c.trace.empty()});
  // --zero 1/2/3: each rank keeps 1/N of the optimizer state (2: and of the reduced gradient; 3: and
  // of the parameters, each layer gathered for its forward and backward).
  auto opt = examples::plain_or_sharded(
      c.zero, ddp, {{model->parameters(), c.lr, c.weight_decay}},
      [&c](std::vector<optim::ParamGroup> g) { return make_optimizer(c, std::move(g)); },
      examples::zero_reduce_scatter_wire("mnist", c.comm_hook, c.zero));
  dist::ZeroOptimizer* sharded = examples::as_sharded(*opt);
  optim::GradScaler scaler({.enabled = dtype == DType::f16});
  dist::sync_found_inf(scaler, group);  // one rank's overflow makes every rank skip the step
  // Each rank its own shard; the same permutation everywhere (seed + epoch).
  auto sampler = std::make_shared<data::DistributedSampler>(
      train->size(),
      data::SamplerOptions{.num_replicas = world.size, .rank = world.rank, .shuffle = true, .seed = c.seed});
  data::DataLoader loader(train, sampler, {.batch_size = c.batch_size, .prefetch = 2, .pin_memory = device.is_cuda()});
  const std::string cpu_kernels = cpu_kernels_description();  // ISA, and whether bf16 uses AVX512_BF16
  log("model: %s, %lld parameters, %s on %s; optimizer %s lr %g; %d threads per rank (CPU kernels: %s); optimizer "
      "state %.1f MiB\n",
      c.model.c_str(), (long long)model->parameter_count(), c.precision.c_str(), device.str().c_str(),
      opt->name().c_str(), c.lr, num_threads(), cpu_kernels.c_str(),
      static_cast<double>(opt->state_bytes()) / (1 << 20));
  const auto buckets = ddp.buckets();
  const bool shared = !buckets.empty() && buckets.front().in_shared_memory;
  log("data parallel: %d ranks (backend %s, %zu buckets%s, comm hook %s); batch %d per rank x %d ranks x %d "
      "accumulation = global batch %d\n",
      world.size, group->backend().c_str(), buckets.size(), shared ? " in shared memory" : "", c.comm_hook.c_str(),
      c.batch_size, world.size, c.accum, c.batch_size * world.size * c.accum);

  // The training state, in one file: rank 0 writes it, every rank reads it on --resume, and the
  // loader's state (epoch, batches taken) makes a resumed run continue with the next batch.
  int64_t global_step = 0;
  optim::TrainingCheckpoint checkpoint;
  checkpoint.add("model", *model).add("scaler", scaler);
  // A sharded optimizer saves its shards into <checkpoint>.zero/ (docs/zero.md), at any world size.
  if (sharded == nullptr) checkpoint.add_optimizer("optimizer", *opt, *model);
  // A compressing hook's state (residuals, PowerSGD's Qs) differs by rank: gathered before each save.
  std::optional<dist::CommHookCheckpoint> hook_state;
  if (comm_hook.state != nullptr) checkpoint.add("comm_hook", hook_state.emplace(comm_hook.state, group));
  checkpoint.add("loader", loader).add("step", global_step);
  checkpoint.metadata = {{"model", c.model}, {"precision", c.precision}};
  dist::sync_checkpoint(checkpoint, group);
  // A destination that cannot be written is found now, not after an epoch of training.
  if (!c.checkpoint.empty()) checkpoint.check_destination(c.checkpoint);
  if (!c.resume.empty()) {
    {
      auto whole = examples::whole_model(*opt, /*write_back=*/true);  // ZeRO-3: the loaded weights into the shards
      log("%s\n", checkpoint.load(c.resume).describe().c_str());
    }
    if (sharded != nullptr) sharded->load_sharded(examples::shard_folder(c.resume), examples::zero_save_id(checkpoint));
  }
  auto save = [&] {
    if (c.checkpoint.empty()) return;
    const profiler::PauseGuard not_training;  // --profile counts the training steps only
    // The shards first, their save's id in the checkpoint: a crash between the two leaves a
    // checkpoint naming shards that are still there (the previous save's are kept).
    if (sharded != nullptr)
      checkpoint.metadata["zero_save_id"] = sharded->save_sharded(examples::shard_folder(c.checkpoint));
    if (hook_state) hook_state->gather();  // collective
    auto whole = examples::whole_model(*opt);
    checkpoint.save(c.checkpoint);  // every rank calls it; rank 0 writes
  };

  const bool tty = isatty(STDOUT_FILENO) && world.size == 1;
  const size_t allocated_before = memory_stats(device).allocated;  // --memory-report
  reset_peak_memory_stats(device);
  auto evaluate_model = [&] {
    const profiler::PauseGuard not_training;
    return evaluate(*model, mnist.test, dtype, device, *group);
  };
  examples::RunLog run_log(c.log_dir, world.rank, c.log_all_ranks);
  Training training{c, world, device, dtype, ddp, *opt, scaler, loader, global_step, save, evaluate_model, run_log};
  auto t_train = Clock::now();
  int64_t trained_samples = 0;
  double train_seconds = 0;
  std::optional<double> accuracy;  // the last evaluation's, for --export
  const int64_t first_step = global_step;
  if (c.profile) profiler::enable({.trace_events = !c.trace.empty()});
  for (int epoch = static_cast<int>(sampler->epoch()); epoch < c.epochs; ++epoch) {
    sampler->set_epoch(epoch);
    const EpochTotals e = train_epoch(training, epoch, tty);
    train_seconds += e.seconds;
    training.seconds_trained = train_seconds;
    trained_samples += e.samples;
    accuracy = evaluate_model();
    run_log.scalar("eval/test_accuracy", *accuracy, global_step);
    log("epoch %d: train loss (rank 0) %.5f, test accuracy %.2f%%, %.1f s, %.0f samples/s (all ranks)\n", epoch + 1,
        e.steps ? e.loss_sum / static_cast<double>(e.steps) : 0.0, *accuracy, e.seconds,
        static_cast<double>(e.samples) * world.size / e.seconds);
    // A finished epoch: the checkpoint then stands at the next one's start (a run stopped by
    // --limit-steps stays inside this one).
    if (loader.batches_taken() == loader.num_batches()) sampler->set_epoch(epoch + 1);
    save();
    if (c.limit_steps > 0 && global_step >= c.limit_steps) break;
  }
  profiler::disable();
  log("done: %lld steps in %.1f s (training %.1f s), %.0f samples/s (all ranks)\n", (long long)global_step,
      seconds_since(t_train), train_seconds,
      static_cast<double>(trained_samples) * world.size / std::max(train_seconds, 1e-9));
  log("%s\n%s%s", ddp.stats().summary().c_str(), examples::gather_summary(*opt, ddp.stats().steps).c_str(),
      examples::comm_hook_summary(c.comm_hook, comm_hook.state.get(), ddp.stats().steps).c_str());
  if (c.profile)
    log("ops of rank 0's training steps (--profile%s):\n%s",
        device.is_cuda() ? "; on the GPU these are the host's times, launches rather than kernels" : "",
        profiler::format_table(profiler::op_table(), global_step - first_step).c_str());
  if (c.memory_report)
    log("%s\n",
        examples::memory_report(*model, *opt, ddp, device, allocated_before, {}, comm_hook.state.get()).c_str());
  const examples::ParameterFingerprint fingerprint = [&] {
    auto whole = examples::whole_model(*opt);
    return examples::parameter_fingerprint(*model);
  }();
  log("parameter checksum %.17g, norm %.17g\n", fingerprint.checksum, fingerprint.norm);
  if (!c.export_path.empty()) {
    // A run that trained nothing (resumed at its end) scores the weights it exports here.
    if (!accuracy) accuracy = evaluate_model();  // collective
    auto whole = examples::whole_model(*opt);    // ZeRO-3: every rank gathers the parameters
    if (world.rank == 0) {
      nn::save_safetensors(c.export_path, model->state_dict(), export_metadata(c, mnist, global_step, *accuracy));
      log("exported the weights to %s (safetensors; docs/interop.md)\n", c.export_path.c_str());
    }
  }
  if (!c.trace.empty()) {
    ddp.write_trace(c.trace);  // collective: every rank sends its events to rank 0
    log("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", c.trace.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (const auto code = mnist::parse_flags(argc, argv, c)) return *code;  // before MPI starts
  const dist::World world = dist::init(&argc, &argv);
  g_speaks = world.rank == 0;
  // A failed rank must not leave the others waiting in a collective: run_or_abort ends the job.
  return dist::run_or_abort([&] {
    mnist::finish(c);
    return run(c, world);
  });
}
