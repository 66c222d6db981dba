// Resharding a ZeroOptimizer checkpoint: train at one world size, resume at another, and end where
// one process training on the whole global batch ends. CTest runs (tests/dist/CMakeLists.txt):
//
//   mpirun -np 2 test_zero_reshard train DIR 0 8      steps 0-7 at N = 2, sharded save
//   mpirun -np 3 test_zero_reshard train DIR 8 16     resume at N = 3 (resharded), steps 8-15
//   test_zero_reshard train DIR 16 24                 resume at N = 1, steps 16-23
//   test_zero_reshard check DIR 24                    one process, plain AdamW, 24 steps: the same
//
// A last argument STAGE (2 when left out) runs the chain at ZeRO stage 3 instead: each rank then
// holds 1/N of the parameters too, and the model is saved and loaded inside gathered_parameters().
//
// The global batch (12 examples: divisible by 1, 2 and 3) is the same at every N, so DDP's average
// over the ranks' means is the mean over the 12 -- what the reference computes. ZeRO-2 with AdamW
// and global-norm clipping; the reference clips with optim::clip_grad_norm.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "dist/init.h"
#include "dist/zero/zero_optimizer.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "rel_l2.h"

namespace rg = ringgrad;
namespace dist = ringgrad::dist;
namespace nn = ringgrad::nn;
namespace optim = ringgrad::optim;

namespace {

constexpr int64_t kGlobalBatch = 12;
const optim::AdamWOptions kAdamW{.lr = 1e-2, .weight_decay = 0.1};
constexpr double kClip = 0.5;

std::shared_ptr<nn::Module> make_mlp() {
  rg::manual_seed(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(20, 13), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(13, 11),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(11, 5)});
}

// Examples [first, first + count) of global batch `step`.
std::pair<rg::Tensor, rg::Tensor> batch(int step, int64_t first, int64_t count) {
  rg::Generator gen(900 + step);
  const rg::Tensor x = rg::randn({kGlobalBatch, 20}, gen);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < kGlobalBatch; ++i) labels.push_back((5 * i + step) % 5);
  const rg::Tensor y = rg::from_vector(labels, {kGlobalBatch}, {.dtype = rg::DType::i64});
  return {x.narrow(0, first, count).contiguous(), y.narrow(0, first, count).contiguous()};
}

int train(const std::string& dir, int from, int to, int stage) {
  const int N = dist::world().size, r = dist::world().rank;
  if (kGlobalBatch % N != 0) {
    std::fprintf(stderr, "world size %d does not divide the global batch %lld\n", N,
                 static_cast<long long>(kGlobalBatch));
    return 1;
  }
  auto model = make_mlp();
  const std::string model_path = dir + "/model.ckpt";
  auto group = dist::new_group("ring");
  dist::DistributedDataParallel ddp(model, group, {.bucket_cap_mb = 0.0006, .first_bucket_mb = 0.0003});
  auto zero = dist::ZeroOptimizer::over<optim::AdamW>(ddp, kAdamW, {.stage = stage});
  if (from > 0) {
    auto whole = zero->gathered_parameters(/*write_back=*/true);  // stage 3: into the shards
    model->load_state_dict(nn::load_checkpoint(model_path));
  }
  if (from > 0) zero->load_sharded(dir);
  const int64_t per_rank = kGlobalBatch / N;
  for (int step = from; step < to; ++step) {
    const auto [x, y] = batch(step, r * per_rank, per_rank);
    zero->zero_grad();
    rg::cross_entropy(ddp(x), y).backward();
    zero->clip_grad_norm(kClip);
    zero->step();
  }
  {
    auto whole = zero->gathered_parameters();  // stage 3: the whole model, to save
    if (r == 0) {
      std::filesystem::create_directories(dir);
      nn::save_checkpoint(model_path, model->state_dict());
    }
  }
  zero->save_sharded(dir);
  if (r == 0)
    std::printf("trained steps %d-%d at N = %d; optimizer state on rank 0: %zu bytes\n", from, to - 1, N,
                zero->state_bytes());
  return 0;
}

int check(const std::string& dir, int steps) {
  auto reference = make_mlp();
  optim::AdamW opt(reference->parameters(), kAdamW);
  for (int step = 0; step < steps; ++step) {
    const auto [x, y] = batch(step, 0, kGlobalBatch);
    opt.zero_grad();
    rg::cross_entropy((*reference)(x), y).backward();
    optim::clip_grad_norm(reference->parameters(), kClip);
    opt.step();
  }
  double worst_param = 0, worst_state = 0;
  const nn::StateDict saved = nn::load_checkpoint(dir + "/model.ckpt");
  for (const auto& [name, t] : reference->named_parameters())
    for (const auto& [key, s] : saved)
      if (key == name) worst_param = std::max(worst_param, rel_l2(t, s));
  const nn::StateDict full = dist::consolidate_sharded(dir);
  const nn::StateDict expected = optim::state_dict_by_name(opt, *reference);
  size_t matched = 0;
  for (const auto& [key, t] : expected)
    for (const auto& [k, s] : full)
      if (k == key) {
        ++matched;
        if (t.shape() != s.shape()) {
          std::printf("FAIL: %s has another shape\n", key.c_str());
          return 1;
        }
        worst_state = std::max(worst_state, rel_l2(t, s));
      }
  std::printf(
      "after %d steps at N = 2, 3, 1 against one process: parameters %.3g, optimizer state %.3g "
      "(largest relative L2 difference), %zu of %zu state entries matched\n",
      steps, worst_param, worst_state, matched, expected.size());
  // f32 sums in another order at each N (the ring's reduce-scatter, then one process's batch mean).
  const bool ok =
      matched == expected.size() && full.size() == expected.size() && worst_param < 1e-5 && worst_state < 1e-4;
  std::printf("%s\n", ok ? "reshard round trip: OK" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    std::fprintf(stderr, "usage: test_zero_reshard train DIR FROM TO [STAGE] | check DIR STEPS\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  if (mode == "check") return check(dir, std::stoi(argv[3]));
  dist::init(&argc, &argv);
  int rc = 1;
  try {
    rc = train(dir, std::stoi(argv[3]), std::stoi(argv[4]), argc == 6 ? std::stoi(argv[5]) : 2);
  } catch (const rg::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
  dist::finalize();
  return rc;
}
