// Training checkpoints across ranks: a run saved mid-way and resumed in fresh objects ends bit for
// bit where the uninterrupted run ends -- f16 parameters with f32 masters (AdamW), a GradScaler
// whose scale moves, per-rank dropout, a DataLoader stopped inside an epoch -- and without the
// random state it does not (so the comparison can fail).
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "data/data.h"
#include "dist/ddp/ddp.h"
#include "dist_test_util.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace nn = ringgrad::nn;
namespace optim = ringgrad::optim;
namespace data = ringgrad::data;

namespace {

constexpr int64_t kExamples = 40, kBatch = 4, kEpochs = 2;

// The same file name on every rank: rank 0's pid, broadcast.
std::string shared_path(dist::ProcessGroup& pg, const std::string& name) {
  rg::Tensor pid = rg::full({1}, static_cast<double>(::getpid()), {.dtype = rg::DType::i64});
  pg.broadcast(pid, 0)->wait();
  return (std::filesystem::temp_directory_path() /
          ("ringgrad_train_ck_" + std::to_string(static_cast<int64_t>(pid.item())) + "_" + name))
      .string();
}

std::shared_ptr<data::TensorDataset> dataset() {
  rg::Generator g(7);  // the same examples on every rank
  rg::Tensor x = rg::randn({kExamples, 8}, g);
  rg::Tensor y = rg::argmax(x.narrow(1, 0, 4), 1);
  return std::make_shared<data::TensorDataset>(x, y);
}

// One training run: f16 model with dropout under DDP, AdamW, GradScaler, sharded loader.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<optim::AdamW> opt;
  optim::GradScaler scaler{{.init_scale = 4096.0, .growth_interval = 2}};
  std::shared_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<data::DataLoader> loader;
  int64_t step = 0;
  optim::TrainingCheckpoint checkpoint;

  Run(uint64_t seed, std::shared_ptr<dist::ProcessGroup> pg) {
    rg::manual_seed(seed);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
        std::make_shared<nn::Linear>(32, 4)});
    model->to(rg::DType::f16);
    ddp = std::make_unique<dist::DistributedDataParallel>(model, pg);
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 0.01});
    dist::sync_found_inf(scaler, pg);
    sampler = std::make_shared<data::DistributedSampler>(kExamples, data::SamplerOptions{.num_replicas = pg->size(),
                                                                                         .rank = pg->rank(),
                                                                                         .seed = 5});
    loader = std::make_unique<data::DataLoader>(dataset(), sampler, data::DataLoaderOptions{.batch_size = kBatch});
    checkpoint.add("model", *model).add_optimizer("optimizer", *opt, *model).add("scaler", scaler);
    checkpoint.add("loader", *loader).add("step", step);
    dist::sync_checkpoint(checkpoint, pg);
  }

  // Trains to the end of the last epoch, or until `stop_at` steps; saves after step `save_at`.
  void train(int64_t stop_at = -1, int64_t save_at = -1, const std::string& path = "") {
    for (int64_t epoch = sampler->epoch(); epoch < kEpochs; ++epoch) {
      sampler->set_epoch(epoch);
      for (const data::Example& batch : *loader) {
        rg::Tensor logits = (*ddp)(batch.input.to(rg::DType::f16)).to(rg::DType::f32);
        scaler.scale(rg::cross_entropy(logits, batch.target)).backward();
        scaler.step(*opt);
        scaler.update();
        opt->zero_grad();
        ++step;
        if (step == save_at) checkpoint.save(path);
        if (step == stop_at) return;
      }
    }
  }
};

// "" when every parameter of `a` equals `b`'s bit for bit, else the first that differs.
std::string first_difference(const nn::Module& a, const nn::Module& b) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (!rg::equal(pa[i].second, pb[i].second))
      return rg::str_cat(
          "rank ", dist::world().rank, ": parameter ", pa[i].first, " differs by ",
          (pa[i].second.to(rg::DType::f64) - pb[i].second.to(rg::DType::f64)).abs().reshape({-1}).max(0).item());
  return "";
}

}  // namespace

TEST_CASE("checkpoint: a run saved mid-way and resumed ends bit for bit as the run that never stopped") {
  auto pg = dist::new_group("ring", test_options());
  const std::string path = shared_path(*pg, "resume");
  // Step 4 falls inside epoch 0 on 1 and 2 ranks (10 and 5 batches an epoch), inside epoch 1 on 4
  // (3 batches), on the boundary on 3 (4 batches).
  constexpr int64_t kSaveAt = 4;

  Run straight(1, pg);
  straight.train();

  {
    Run first_half(1, pg);
    first_half.train(/*stop_at=*/kSaveAt + 1, /*save_at=*/kSaveAt, path);  // one step past the save, lost
  }
  Run resumed(99, pg);  // another seed: every value must come from the file
  const optim::CheckpointReport report = resumed.checkpoint.load(path);
  CHECK(report.all_matched());
  CHECK_FALSE(report.legacy_layout);
  CHECK(report.saved_world_size == pg->size());
  CHECK(resumed.step == kSaveAt);
  resumed.train();

  CHECK(resumed.step == straight.step);
  CHECK(first_difference(*resumed.model, *straight.model) == "");
  CHECK(resumed.scaler.get_scale() == straight.scaler.get_scale());
  CHECK(resumed.scaler.get_scale() != 4096.0);  // the scale moved, so restoring it mattered
  const rg::StateDict sa = optim::state_dict_by_name(*straight.opt, *straight.model);
  const rg::StateDict sb = optim::state_dict_by_name(*resumed.opt, *resumed.model);
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CAPTURE(sa[i].first);
    CHECK(sa[i].first == sb[i].first);
    CHECK(rg::equal(sa[i].second, sb[i].second));
  }

  // Without the random state the dropout masks after the resume differ, and so does the result.
  Run forgetful(1, pg);
  forgetful.checkpoint.load(path, {.random_state = false});
  forgetful.train();
  CHECK(first_difference(*forgetful.model, *straight.model) != "");
  pg->barrier()->wait();
  if (pg->rank() == 0) std::filesystem::remove(path);
}

TEST_CASE("checkpoint: a write that fails on rank 0 is an error on every rank") {
  auto pg = dist::new_group("ring", test_options());
  int64_t step = 3;
  optim::TrainingCheckpoint checkpoint;
  checkpoint.add("step", step);
  dist::sync_checkpoint(checkpoint, pg);
  const std::string path = "/nonexistent-directory/ck";
  if (pg->rank() == 0) CHECK_THROWS_WITH_AS(checkpoint.save(path), doctest::Contains("cannot create"), rg::Error);
  else CHECK_THROWS_WITH_AS(checkpoint.save(path), doctest::Contains("rank 0 failed to write"), rg::Error);
}
