// dist::Join over uneven inputs: rank r holds 5 - r batches. Under Join the epoch ends on every rank,
// and the parameters equal those of one process taking the same steps -- step s on the batches of
// the ranks that still had one, concatenated. Without the divisor over contributing ranks (PyTorch's
// divide_by_initial_world_size) the late steps differ, so the comparison can fail.
#include <algorithm>
#include <cmath>

#include "dist/ddp/ddp.h"
#include "dist/ddp/join.h"
#include "dist_test_util.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace nn = ringgrad::nn;
namespace optim = ringgrad::optim;

namespace {

constexpr int64_t kBatch = 4, kFeatures = 6, kClasses = 3;

int batches_of(int rank) { return 5 - rank; }

// Rank r's batch s, the same wherever it is built.
std::pair<rg::Tensor, rg::Tensor> batch(int rank, int s) {
  rg::Generator g(static_cast<uint64_t>(100 + 10 * rank + s));
  rg::Tensor x = rg::randn({kBatch, kFeatures}, g);
  rg::Tensor y = rg::argmax(x.narrow(1, 0, kClasses), 1);
  return {x, y};
}

std::shared_ptr<nn::Sequential> model() {
  rg::manual_seed(3);
  return std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(kFeatures, 8),
                                                         std::make_shared<nn::ReLU>(),
                                                         std::make_shared<nn::Linear>(8, kClasses)});
}

optim::SGDOptions sgd() { return {.lr = 0.2, .momentum = 0.9}; }

// One process: step s on every batch s of the ranks that have one.
std::vector<rg::Tensor> reference(int world) {
  auto m = model();
  optim::SGD opt(m->parameters(), sgd());
  for (int s = 0; s < batches_of(0); ++s) {
    std::vector<rg::Tensor> xs, ys;
    for (int r = 0; r < world; ++r)
      if (s < batches_of(r)) {
        auto [x, y] = batch(r, s);
        xs.push_back(x);
        ys.push_back(y);
      }
    opt.zero_grad();
    rg::cross_entropy(m->forward(rg::cat(xs)), rg::cat(ys)).backward();
    opt.step();
  }
  std::vector<rg::Tensor> out;
  for (const rg::Tensor& p : m->parameters()) out.push_back(p.clone());
  return out;
}

double max_difference(const std::vector<rg::Tensor>& a, const std::vector<rg::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto u = a[i].to_vector(), v = b[i].to_vector();
    for (size_t k = 0; k < u.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
  }
  return worst;
}

std::vector<rg::Tensor> parameters(nn::Module& m) {
  std::vector<rg::Tensor> out;
  for (const rg::Tensor& p : m.parameters()) out.push_back(p.clone());
  return out;
}

}  // namespace

namespace {

// This rank's batches, one SGD step each, under a Join; the destructor finishes when `finish` is false.
dist::JoinReport train_under_join(dist::DistributedDataParallel& ddp, optim::SGD& opt, dist::JoinOptions options,
                                  bool finish) {
  const int rank = ddp.group().rank();
  dist::Join join(ddp, std::move(options));
  for (int s = 0; s < batches_of(rank); ++s) {
    auto [x, y] = batch(rank, s);
    opt.zero_grad();
    rg::cross_entropy(ddp(x), y).backward();
    opt.step();
  }
  return finish ? join.finish() : dist::JoinReport{};
}

}  // namespace

TEST_CASE("join: ranks with 5, 4, 3 ... batches end the epoch with one process's parameters") {
  auto pg = dist::new_group("ring", test_options(30));
  const int rank = pg->rank(), N = pg->size();
  auto m = model();
  dist::DistributedDataParallel ddp(m, pg);
  optim::SGD opt(m->parameters(), sgd());
  const dist::JoinReport report = train_under_join(ddp, opt, {}, /*finish=*/true);
  const double diff = max_difference(parameters(*m), reference(N));
  INFO("rank ", rank, "/", N, ": largest difference from one process ", diff);
  CHECK(diff < 1e-5);
  CHECK(report.shadowed_steps == batches_of(0) - batches_of(rank));
  CHECK(report.shadowed_forwards == report.shadowed_steps);
  CHECK(report.authority == 0);

  // The same run, gradients divided by the group's size: the late steps are smaller, so it differs.
  if (N > 1) {
    auto m2 = model();
    dist::DistributedDataParallel ddp2(m2, pg);
    optim::SGD opt2(m2->parameters(), sgd());
    train_under_join(ddp2, opt2, {.divide_by_initial_world_size = true}, /*finish=*/false);
    CHECK(max_difference(parameters(*m2), reference(N)) > 1e-4);
  }
}

TEST_CASE("join: no_sync micro-batches and a collective GradScaler are shadowed too") {
  auto pg = dist::new_group("ring", test_options(30));
  const int rank = pg->rank(), N = pg->size();
  auto m = model();
  dist::DistributedDataParallel ddp(m, pg);
  optim::SGD opt(m->parameters(), sgd());
  optim::GradScaler scaler({.init_scale = 1024.0});
  dist::sync_found_inf(scaler, pg);
  dist::JoinReport report;
  {
    dist::Join join(ddp, {.scalers = {&scaler}});
    for (int s = 0; s < batches_of(rank); ++s) {
      auto [x, y] = batch(rank, s);
      opt.zero_grad();
      {  // two micro-batches of kBatch / 2: the mean of their means is the batch's mean
        auto guard = ddp.no_sync();
        rg::Tensor loss = rg::cross_entropy(ddp(x.narrow(0, 0, kBatch / 2)), y.narrow(0, 0, kBatch / 2));
        scaler.scale(loss * 0.5).backward();
      }
      rg::Tensor loss =
          rg::cross_entropy(ddp(x.narrow(0, kBatch / 2, kBatch / 2)), y.narrow(0, kBatch / 2, kBatch / 2));
      scaler.scale(loss * 0.5).backward();
      CHECK(scaler.step(opt));
      scaler.update();
    }
    report = join.finish();
  }
  const double diff = max_difference(parameters(*m), reference(N));
  INFO("rank ", rank, "/", N, ": largest difference from one process ", diff);
  CHECK(diff < 1e-5);
  CHECK(report.shadowed_steps == batches_of(0) - batches_of(rank));
  CHECK(report.shadowed_forwards == 2 * report.shadowed_steps);
}

TEST_CASE("join: ranks that disagree on no_sync at a step get an error naming them, not a hang") {
  auto pg = dist::new_group("ring", test_options(30));
  if (pg->size() < 2) return;
  auto m = model();
  dist::DistributedDataParallel ddp(m, pg);
  const rg::Tensor x = batch(pg->rank(), 0).first;  // a lambda below uses it: no structured binding (clang 14)
  dist::Join join(ddp);
  auto forward = [&] {
    if (pg->rank() == 0) {
      auto guard = ddp.no_sync();
      return ddp(x);
    }
    return ddp(x);
  };
  CHECK_THROWS_WITH_AS(forward(), doctest::Contains("disagree on whether this step synchronises"), rg::Error);
  join.finish();  // the group is still usable: every rank saw the same agreement and left the step
}
