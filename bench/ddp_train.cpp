// ddp_train: training throughput of W1 (MLP) or W2 (CNN) on Fashion-MNIST, one process or data
// parallel -- the ringgrad side of bench/ddp_compare.sh (../shared/WORKLOADS.md).
//
//   build/bench/ddp_train --model mlp --threads 1                 # variant (a)
//   build/bench/ddp_train --model mlp --threads 2                 # variant (b)
//   mpirun -np 2 build/bench/ddp_train --model mlp --threads 1    # variant (c)
//   ... --zero 1|2          # the SGD state (and at 2 the gradients) sharded: dist::ZeroOptimizer
//   ... --comm-hook fp16    # diagnostic, not W1: gradients travel as f16 (half the bytes)
//   ... --comm-hook sync-only  # diagnostic, not W1: DDP's lockstep without the gradients (below)
//   ... --trace FILE           # DDP's Chrome trace of both ranks, every step (tools/trace_timeline.py)
//   ... --step-times FILE      # each timed step's wall ms (FILE.<rank> with 2+ ranks; scaling_floor.sh)
//
// The training set is loaded and standardised before the clock starts; each step gathers the next
// per-rank batch of a seeded permutation (this rank's shard: every N-th example), runs forward,
// backward (with 2+ ranks DDP averages the gradients) and an SGD step (momentum 0.9, lr 0.05). --warmup steps are
// untimed, then --steps are timed. Prints one line per run that the driver parses:
//   RESULT impl=ringgrad model=mlp ranks=2 threads=1 batch=128 steps=200 samples_per_s=... overlap=...
#include <cstdio>
#include <string>

#include <ringgrad.h>
#include "bench/train_bench.h"
#include "examples/mnist/models.h"

using namespace ringgrad;

int main(int argc, char** argv) {
  bench::TrainFlags flags;  // W1's defaults (--batch 0: 128 for the MLP, 64 for the CNN)
  flags.model = "mlp";
  flags.data = "/usr/share/datasets/fashion-mnist";
  if (const auto code = bench::parse_train_flags(argc, argv, flags, {"--model"},
                                                 "W1 / W2 training throughput, one process or data parallel"))
    return *code;
  const std::string& model_name = flags.model;
  const int batch = flags.batch > 0 ? flags.batch : model_name == "mlp" ? 128 : 64;
  try {
    const dist::World w = dist::init(&argc, &argv);
    set_num_threads(flags.threads);
    double samples_per_s = 0, overlap = 0, wire_bytes = 0;
    {
      data::Mnist mnist = data::load_mnist(flags.data, /*normalize=*/model_name == "mlp");
      if (model_name != "mlp") mnist.train.images = (mnist.train.images - 0.5) * 2.0;
      const Tensor images = mnist.train.images.to(bench::precision_dtype(flags)), labels = mnist.train.labels;
      const int64_t n = images.size(0);
      manual_seed(1);
      auto model = mnist::make_model(model_name);
      model->to(bench::precision_dtype(flags));  // bf16: the optimizer keeps f32 master weights
      auto group = dist::new_group(flags.backend);
      // One process trains the plain model, as the PyTorch peer does: DDP in a world of one would
      // only add bucket bookkeeping. From 2 ranks on, DDP.
      std::unique_ptr<dist::DistributedDataParallel> ddp;
      // --comm-hook sync-only (diagnostic, wrong gradients): each bucket AllReduces one element
      // instead of its gradients, so the ranks keep DDP's lockstep -- every step waits for the
      // slower rank -- without the gradient traffic. Against the full hook it tells what moving the
      // gradients costs, against one process what lockstep and a busy second core cost.
      Tensor sync_token = zeros({1});
      dist::CommHook hook = flags.comm_hook == "sync-only"
                                ? dist::CommHook([&](dist::ProcessGroup& g, dist::GradBucket&) -> dist::HookWork {
                                    return {g.allreduce(sync_token), nullptr};
                                  })
                                : dist::make_comm_hook(flags.comm_hook, {.rank = flags.powersgd_rank,
                                                                         .start_iteration = flags.powersgd_start})
                                      .hook;
      if (w.size > 1 || flags.zero > 0)
        ddp = std::make_unique<dist::DistributedDataParallel>(model, group,
                                                              dist::DDPOptions{.bucket_cap_mb = flags.bucket_mb,
                                                                               .first_bucket_mb = flags.first_bucket_mb,
                                                                               .comm_hook = hook,
                                                                               .trace = !flags.trace.empty()});
      const optim::SGDOptions sgd{.lr = 0.05, .momentum = 0.9};
      std::unique_ptr<optim::Optimizer> opt;
      if (flags.zero > 0)
        opt = dist::ZeroOptimizer::over<optim::SGD>(*ddp, sgd, {.stage = flags.zero, .staging_mb = flags.staging_mb});
      else opt = std::make_unique<optim::SGD>(model->parameters(), sgd);
      const std::vector<int64_t> order = data::seeded_permutation(n, 7);
      int64_t cursor = w.rank;  // this rank's shard: every N-th example of the permutation
      auto next_batch = [&] {
        std::vector<double> idx;
        for (int i = 0; i < batch; ++i, cursor += w.size) idx.push_back(static_cast<double>(order[cursor % n]));
        const Tensor at = from_vector(idx, {batch}, {.dtype = DType::i64});
        return std::make_pair(index_select(images, 0, at), index_select(labels, 0, at));
      };
      auto step = [&] {
        auto [x, y] = next_batch();
        opt->zero_grad();
        nn::F::cross_entropy(ddp ? ddp->forward(x) : model->forward(x), y).backward();
        opt->step();
      };
      const double seconds = bench::time_steps(step, flags, *group, ddp.get(), &wire_bytes);
      if (ddp && !flags.trace.empty()) ddp->write_trace(flags.trace);  // collective
      samples_per_s = static_cast<double>(flags.steps) * batch * w.size / seconds;
      overlap = bench::report_overlap(ddp.get(), w.rank);
    }
    if (w.rank == 0)
      std::printf(
          "RESULT impl=ringgrad model=%s ranks=%d threads=%d batch=%d steps=%d precision=%s zero=%d "
          "samples_per_s=%.1f overlap=%.0f comm_hook=%s wire_bytes_per_step=%.0f\n",
          model_name.c_str(), w.size, flags.threads, batch, flags.steps, flags.precision.c_str(), flags.zero,
          samples_per_s, overlap, flags.comm_hook.c_str(), wire_bytes);
    dist::finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 1;
  }
}
