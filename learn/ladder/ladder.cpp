// climb(): one rung's program -- the rung and the one below it (or, under rung 1, one process on
// the whole global batch), trained side by side, their averaged gradients compared at every step.
#include "learn/ladder/ladder.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/parallel.h"
#include "dist/init.h"
#include "examples/common/command_line.h"
#include "optim/optim.h"

namespace rg = ringgrad;

namespace learn {
namespace {

constexpr int64_t kPerRank = 128;  // examples per rank and micro-batch
constexpr int kSteps = 12, kWarmup = 2;

// 784 -> 256 x 6 -> 10: 14 parameters, some 530k elements, a few buckets of kBucketBytes.
std::shared_ptr<rg::nn::Module> make_model() {
  rg::manual_seed(11);  // the same weights on every rank and for both replicas
  auto model = std::make_shared<rg::nn::Sequential>();
  int64_t width = 784;
  for (int i = 0; i < 6; ++i) {
    model->push_back(std::make_shared<rg::nn::Linear>(width, 256));
    model->push_back(std::make_shared<rg::nn::ReLU>());
    width = 256;
  }
  model->push_back(std::make_shared<rg::nn::Linear>(width, 10));
  return model;
}

struct Batch {
  rg::Tensor x, y;  // x: (B, 784), y: (B) class indices
};

// The step's global batch of N * K * kPerRank examples, the same on every rank.
Batch global_batch(int step, int N, int K) {
  rg::Generator gen(700 + step);
  const int64_t B = N * K * kPerRank;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < B; ++i) labels.push_back((i * 7 + step) % 10);
  return {rg::randn({B, 784}, gen), rg::from_vector(labels, {B}, {.dtype = rg::DType::i64})};
}

Batch rows(const Batch& b, int64_t first, int64_t count) {
  return {b.x.narrow(0, first, count), b.y.narrow(0, first, count)};
}

// ||a - b|| / ||b|| over every parameter's gradient, the largest on any rank.
double gradient_distance(rg::nn::Module& a, rg::nn::Module& b) {
  double worst = 0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const rg::Tensor d = pa[i].grad() - pb[i].grad();
    const double norm = std::sqrt((pb[i].grad() * pb[i].grad()).sum().item());
    worst = std::max(worst, std::sqrt((d * d).sum().item()) / std::max(norm, 1e-30));
  }
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

int climb(int argc, char** argv, MakeRung rung, MakeRung below, int accumulation) {
  if (const auto code = rg::flags::parse_no_flags(
          argc, argv,
          "A rung of the ladder (docs/learn/13-the-ladder.md): trains beside the rung below, same gradients "
          "required, and prints both step times (run under mpirun)"))
    return *code;
  const rg::dist::World world = rg::dist::init(&argc, &argv);
  return rg::dist::run_or_abort([&] {
    rg::set_num_threads(1);
    const int N = world.size, r = world.rank, K = accumulation;
    // A slow link, 1 GB/s with 200 us per operation, so that what each rung saves shows on one
    // machine (Note [Simulated network] in dist/simulated_network.h).
    rg::dist::GroupOptions options;
    options.simulated_network = rg::dist::SimulatedNetwork{.bandwidth_gbps = 1, .latency_us = 200};
    auto group = rg::dist::new_group("ring", options);
    auto model = make_model(), reference = make_model();
    std::unique_ptr<GradientSync> mine = rung(*model, *group);
    std::unique_ptr<GradientSync> lower = below != nullptr ? below(*reference, *group) : nullptr;
    rg::optim::SGD opt(model->parameters(), {.lr = 0.05}), ref_opt(reference->parameters(), {.lr = 0.05});
    std::vector<double> my_ms, ref_ms;
    double worst = 0;
    for (int step = 0; step < kSteps; ++step) {
      const Batch global = global_batch(step, N, K);
      const Batch ours = rows(global, r * K * kPerRank, K * kPerRank);  // this rank's K micro-batches
      // K micro-batches, each loss scaled by 1/K so that their sum is the mean over this rank's
      // examples. This rung synchronises on the last only; the rung below on every one -- which
      // gives the same average (each synchronised .grad is already equal on every rank, and the
      // average of a sum is the sum of the averages) for K times the AllReduces.
      auto micro_batches = [&](rg::nn::Module& m, GradientSync& sync, bool every) {
        for (int k = 0; k < K; ++k) {
          const Batch micro = rows(ours, k * kPerRank, kPerRank);
          sync.backward(rg::cross_entropy(m(micro.x), micro.y) * (1.0 / K), every || k == K - 1);
        }
      };
      // The rung below; under rung 1, one process on the whole global batch.
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      ref_opt.zero_grad();
      if (lower != nullptr) micro_batches(*reference, *lower, /*every=*/true);
      else rg::cross_entropy((*reference)(global.x), global.y).backward();
      if (step >= kWarmup) ref_ms.push_back(ms_since(t0));
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = Clock::now();
      opt.zero_grad();
      micro_batches(*model, *mine, /*every=*/false);
      if (step >= kWarmup) my_ms.push_back(ms_since(t0));
      worst = std::max(worst, gradient_distance(*model, *reference));
      opt.step();
      ref_opt.step();
    }
    const bool ok = worst <= 1e-5;
    if (r == 0) {
      std::printf("%d ranks, %lld examples per rank and step%s, a simulated 1 GB/s link with 200 us per operation\n", N,
                  static_cast<long long>(K * kPerRank),
                  K > 1 ? (" in " + std::to_string(K) + " micro-batches").c_str() : "");
      std::printf("  this rung  %-70s %7.2f ms per step\n", mine->name().c_str(), median(my_ms));
      std::printf("  below it   %-70s %7.2f ms per step\n",
                  lower != nullptr ? lower->name().c_str() : "one process, the whole global batch, no communication",
                  median(ref_ms));
      std::printf(
          "%s: averaged gradients %s the rung below's at every one of %d steps (largest relative distance "
          "%.1e)\n",
          ok ? "OK" : "FAIL", ok ? "equal" : "differ from", kSteps, worst);
    }
    return ok ? 0 : 1;
  });
}

}  // namespace learn
