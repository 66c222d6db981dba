// A short training smoke test on data with a known answer: a synthetic 4-class problem whose classes
// are separable Gaussian blobs. The MLP must reach 95% accuracy on held-out points within 300 SGD steps.
#include <doctest/doctest.h>

#include "ringgrad.h"

using namespace ringgrad;

TEST_CASE("an MLP learns a separable 4-class problem in 300 steps (>= 95% held-out accuracy)") {
  Generator gen(21);
  const int64_t classes = 4, dim = 8, n = 2048;
  Tensor centers = randn({classes, dim}, gen) * 2.0;
  Tensor labels = from_vector(std::vector<int64_t>(n), {n});
  {
    std::vector<int64_t> l(n);
    for (int64_t i = 0; i < n; ++i) l[i] = i % classes;
    labels = from_vector(l, {n});
  }
  Tensor x = index_select(centers, 0, labels) + randn({n, dim}, gen) * 0.7;
  auto train = std::make_shared<data::TensorDataset>(x.narrow(0, 0, 1536), labels.narrow(0, 0, 1536));
  manual_seed(3);
  nn::Sequential model{std::make_shared<nn::Linear>(dim, 32), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(32, classes)};
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  auto sampler =
      std::make_shared<data::DistributedSampler>(train->size(),
                                                 data::SamplerOptions{.num_replicas = 1, .rank = 0, .seed = 1});
  data::DataLoader loader(train, sampler, {.batch_size = 64});
  int steps = 0;
  for (int epoch = 0; steps < 300; ++epoch) {
    sampler->set_epoch(epoch);
    for (const data::Example& b : loader) {
      Tensor loss = nn::F::cross_entropy(model.forward(b.input), b.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (++steps == 300) break;
    }
  }
  NoGradGuard no_grad;
  const double acc = nn::F::accuracy(model.forward(x.narrow(0, 1536, 512)), labels.narrow(0, 1536, 512));
  MESSAGE("held-out accuracy " << acc);
  CHECK(acc >= 0.95);
}
