// The small training state fuzz_training_checkpoint loads files into, and tests/fuzz/make_seeds
// saves its seed from: a Linear model with SGD momentum state, an enabled GradScaler, a data loader
// part-way through an epoch, a counter and metadata of each kind.
#pragma once

#include <memory>

#include "core/ops.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "nn/linear.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "optim/training_checkpoint.h"

namespace ringgrad::fuzz {

struct TrainingSetup {
  std::shared_ptr<nn::Linear> model = std::make_shared<nn::Linear>(3, 2);
  optim::SGD optimizer{model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9}};
  optim::GradScaler scaler{{.enabled = true}};
  std::shared_ptr<data::TensorDataset> dataset =
      std::make_shared<data::TensorDataset>(ones({8, 3}), zeros({8}, {.dtype = DType::i64}));
  std::shared_ptr<data::DistributedSampler> sampler =
      std::make_shared<data::DistributedSampler>(8, data::SamplerOptions{.num_replicas = 1, .rank = 0, .seed = 3});
  data::DataLoader loader{dataset, sampler, {.batch_size = 2}};
  int64_t step = 0;
  optim::TrainingCheckpoint checkpoint;

  TrainingSetup() {
    checkpoint.add("model", *model).add_optimizer("optimizer", optimizer, *model).add("scaler", scaler);
    checkpoint.add("loader", loader).add("step", step);
    checkpoint.metadata = {{"name", std::string("fuzz")}, {"layers", int64_t{1}}, {"ratio", 0.5}};
  }

  // One SGD step, so that the optimizer has momentum buffers and the loader a position.
  void train_one_step() {
    for (const data::Example& batch : loader) {
      optimizer.zero_grad();
      ((*model)(batch.input)).sum().backward();
      scaler.step(optimizer);
      scaler.update();
      ++step;
      break;
    }
  }
};

}  // namespace ringgrad::fuzz
