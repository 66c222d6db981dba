// The harness of the avg-vs-sum exercise. Each rank trains a DDP replica on its N-th of every
// global batch, once with DDP's averaging and once with your sum_hook, under SGD and under Adam,
// and compares it with one process training on the whole global batch. What it shows:
//   - averaging is exactly the single process (to rounding);
//   - under SGD, summing is the single process with its learning rate times N;
//   - under Adam, summing changes almost nothing: m / (sqrt(v) + eps) cancels a constant factor
//     (but eps acts N times smaller, and clipping to a fixed norm would clip N times harder).
#include <cmath>
#include <cstdio>
#include <functional>

#include "dist/init.h"
#include "examples/common/command_line.h"
#include "learn/avg_vs_sum/avg_vs_sum.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace rg = ringgrad;
namespace dist = ringgrad::dist;

namespace {

constexpr int64_t kPerRank = 4, kSteps = 10;

std::shared_ptr<rg::nn::Module> make_model() {
  rg::manual_seed(7);  // every replica and the reference start equal
  return std::make_shared<rg::nn::Sequential>(
      std::initializer_list<std::shared_ptr<rg::nn::Module>>{std::make_shared<rg::nn::Linear>(10, 16),
                                                             std::make_shared<rg::nn::ReLU>(),
                                                             std::make_shared<rg::nn::Linear>(16, 3)});
}

struct Batch {
  rg::Tensor x, y;
};
Batch global_batch(int step, int N) {  // the same on every rank
  rg::Generator gen(1000 + step);
  const rg::Tensor x = rg::randn({N * kPerRank, 10}, gen);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < N * kPerRank; ++i) labels.push_back((i * 7 + step) % 3);
  return {x, rg::from_vector(labels, {N * kPerRank}, {.dtype = rg::DType::i64})};
}

using MakeOptimizer = std::function<std::unique_ptr<rg::optim::Optimizer>(std::vector<rg::Tensor>, double lr)>;

// ||a - b|| / ||a|| over all parameters.
double distance(const rg::nn::Module& a, const rg::nn::Module& b) {
  double diff = 0, norm = 0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const rg::Tensor d = pa[i] - pb[i];
    diff += (d * d).sum().item();
    norm += (pa[i] * pa[i]).sum().item();
  }
  return std::sqrt(diff / norm);
}

std::shared_ptr<rg::nn::Module> train_single(const MakeOptimizer& make, double lr, int N) {
  auto model = make_model();
  auto opt = make(model->parameters(), lr);
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = global_batch(step, N);
    opt->zero_grad();
    rg::cross_entropy((*model)(b.x), b.y).backward();
    opt->step();
  }
  return model;
}

std::shared_ptr<rg::nn::Module> train_ddp(const MakeOptimizer& make, double lr, dist::CommHook hook) {
  const int N = dist::world().size, r = dist::world().rank;
  auto model = make_model();
  dist::DistributedDataParallel ddp(model, dist::new_group("ring"), {.comm_hook = std::move(hook)});
  auto opt = make(model->parameters(), lr);
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = global_batch(step, N);
    opt->zero_grad();
    rg::cross_entropy(ddp(b.x.narrow(0, r * kPerRank, kPerRank)), b.y.narrow(0, r * kPerRank, kPerRank)).backward();
    opt->step();
  }
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  if (const auto code = ringgrad::flags::parse_no_flags(argc, argv,
                                                        "The avg-vs-sum exercise: DDP's averaging against your "
                                                        "sum_hook, checked against one process (run under mpirun)"))
    return *code;
  const dist::World world = dist::init(&argc, &argv);
  return dist::run_or_abort([&] {
    const int N = world.size;
    const MakeOptimizer sgd = [](std::vector<rg::Tensor> p, double lr) {
      return std::make_unique<rg::optim::SGD>(std::move(p), rg::optim::SGDOptions{.lr = lr});
    };
    const MakeOptimizer adam = [](std::vector<rg::Tensor> p, double lr) {
      return std::make_unique<rg::optim::Adam>(std::move(p), rg::optim::AdamOptions{.lr = lr});
    };
    const double sgd_avg = distance(*train_single(sgd, 0.1, N), *train_ddp(sgd, 0.1, nullptr));
    const double sgd_sum = distance(*train_single(sgd, 0.1, N), *train_ddp(sgd, 0.1, learn::sum_hook));
    const double sgd_sum_vs_lr_n = distance(*train_single(sgd, 0.1 * N, N), *train_ddp(sgd, 0.1, learn::sum_hook));
    const double adam_avg = distance(*train_single(adam, 1e-2, N), *train_ddp(adam, 1e-2, nullptr));
    const double adam_sum = distance(*train_single(adam, 1e-2, N), *train_ddp(adam, 1e-2, learn::sum_hook));
    if (world.rank == 0) {
      std::printf("N = %d ranks, %lld steps; distance from one process on the whole batch (relative L2):\n", N,
                  static_cast<long long>(kSteps));
      std::printf("  SGD,  average: %.2e\n  SGD,  sum:     %.2e   (against one process at lr x %d: %.2e)\n", sgd_avg,
                  sgd_sum, N, sgd_sum_vs_lr_n);
      std::printf("  Adam, average: %.2e\n  Adam, sum:     %.2e\n", adam_avg, adam_sum);
    }
    bool ok = sgd_avg < 1e-5 && adam_avg < 1e-5;
    if (!ok && world.rank == 0) std::printf("FAIL: DDP's own averaging should match one process\n");
    if (sgd_sum < 1e-2 || sgd_sum_vs_lr_n > 1e-5) {
      ok = false;
      if (world.rank == 0) std::printf("FAIL: a summing hook should train like one process at lr x N under SGD\n");
    }
    if (adam_sum > 1e-3) {
      ok = false;
      if (world.rank == 0) std::printf("FAIL: under Adam a constant factor on the gradient should almost cancel\n");
    }
    if (ok && world.rank == 0)
      std::printf("OK: a sum is SGD at lr x N; Adam barely notices (a factor cancels in m / sqrt(v))\n");
    return ok ? 0 : 1;
  });
}
