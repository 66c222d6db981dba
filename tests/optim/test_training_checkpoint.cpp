// TrainingCheckpoint's pieces in one process: optimizer state keyed by name, the loader's position,
// the random state, strictness, metadata, rollback of a refused load, and files of the older layout.
// (Bit-exact resume across ranks: tests/dist/test_checkpoint.cpp.)
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "ringgrad.h"

using namespace ringgrad;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ringgrad_tck_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::shared_ptr<nn::Sequential> mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 2)});
}

void one_step(nn::Module& model, optim::Optimizer& opt, uint64_t seed) {
  Generator g(seed);
  Tensor x = randn({5, 3}, g);
  nn::F::mse_loss(model.forward(x), zeros({5, 2})).backward();
  opt.step();
  opt.zero_grad();
}

bool has(const StateDict& s, const std::string& key) {
  return std::any_of(s.begin(), s.end(), [&](const auto& e) { return e.first == key; });
}

}  // namespace

TEST_CASE("optimizer state keyed by parameter name loads into parameters given in another order") {
  auto model = mlp(1);
  optim::Adam opt(model->parameters(), {.lr = 0.01});
  one_step(*model, opt, 3);
  const StateDict named = optim::state_dict_by_name(opt, *model);
  CHECK(has(named, "0.weight.exp_avg"));
  CHECK(has(named, "2.bias.exp_avg_sq"));
  CHECK(has(named, "param_groups.0.lr"));
  CHECK_FALSE(has(named, "0.exp_avg"));

  // The same model, its parameters handed over reversed: by index the moments would land on the
  // wrong tensors (and fail on shape); by name each finds its own.
  auto params = model->parameters();
  std::reverse(params.begin(), params.end());
  optim::Adam reversed(params, {.lr = 0.5});
  optim::load_state_dict_by_name(reversed, *model, named);
  CHECK(reversed.lr() == doctest::Approx(0.01));
  const StateDict back = optim::state_dict_by_name(reversed, *model);
  for (const auto& [key_binding, t] : named) {
    const std::string& key = key_binding;  // lambdas cannot capture a structured binding (clang 14)
    CAPTURE(key);
    auto it = std::find_if(back.begin(), back.end(), [&](const auto& e) { return e.first == key; });
    REQUIRE(it != back.end());
    CHECK(equal(it->second, t));
  }
  // State keyed by index (Optimizer::state_dict, older files) still loads.
  optim::Adam by_index(model->parameters(), {.lr = 0.01});
  optim::load_state_dict_by_name(by_index, *model, opt.state_dict());
  CHECK(equal(by_index.state_dict()[1].second, opt.state_dict()[1].second));

  StateDict stray = named;
  stray.emplace_back("9.weight.exp_avg", zeros({4, 3}));
  CHECK_THROWS_WITH_AS(optim::load_state_dict_by_name(by_index, *model, stray),
                       doctest::Contains("'9.weight.exp_avg' names no parameter"), Error);
  auto stranger = mlp(2);
  optim::SGD foreign(stranger->parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH_AS(optim::state_dict_by_name(foreign, *model), doctest::Contains("is not a parameter of the model"),
                       Error);
}

TEST_CASE("the DataLoader resumes inside an epoch with the batches the saved run had not taken") {
  Generator g(4);
  auto dataset = std::make_shared<data::TensorDataset>(randn({23, 2}, g), arange(0, 23));
  auto make = [&](int64_t batch_size, uint64_t seed) {
    auto sampler =
        std::make_shared<data::DistributedSampler>(23,
                                                   data::SamplerOptions{.num_replicas = 1, .rank = 0, .seed = seed});
    return std::make_unique<data::DataLoader>(dataset, sampler, data::DataLoaderOptions{.batch_size = batch_size});
  };
  auto original = make(5, 9);
  original->sampler().set_epoch(3);
  std::vector<Tensor> rest;
  StateDict saved;
  int64_t taken = 0;
  for (const data::Example& b : *original) {
    if (++taken == 2) saved = original->state_dict();
    if (taken > 2) rest.push_back(b.target);
  }
  REQUIRE(rest.size() == 3);  // 23 examples in batches of 5: 5 batches, 2 taken before the save

  auto resumed = make(5, 9);
  resumed->load_state_dict(saved);
  CHECK(resumed->sampler().epoch() == 3);
  resumed->sampler().set_epoch(resumed->sampler().epoch());
  std::vector<Tensor> got;
  for (const data::Example& b : *resumed) got.push_back(b.target);
  REQUIRE(got.size() == rest.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(equal(got[i], rest[i]));
  // The next epoch is whole again.
  resumed->sampler().set_epoch(4);
  int64_t batches = 0;
  for (const data::Example& b : *resumed) batches += b.target.numel() > 0;
  CHECK(batches == 5);

  CHECK_THROWS_WITH_AS(make(4, 9)->load_state_dict(saved), doctest::Contains("its batches are not the saved ones"),
                       Error);
  CHECK_THROWS_WITH_AS(make(5, 10)->load_state_dict(saved), doctest::Contains("saved with seed 9"), Error);
}

// Note [Resuming at another world size] in data/dataloader.cpp: 2 ranks x 6 saved inside an epoch,
// 3 ranks x 4 resumed: each later global batch holds the same samples as in the saved run.
TEST_CASE("the DataLoader resumes inside an epoch at another world size that keeps the global batch") {
  Generator g(5);
  auto dataset = std::make_shared<data::TensorDataset>(randn({48, 2}, g), arange(0, 48));
  auto make = [&](int64_t batch_size, int64_t replicas, int64_t rank) {
    auto sampler = std::make_shared<data::DistributedSampler>(48, data::SamplerOptions{.num_replicas = replicas,
                                                                                       .rank = rank,
                                                                                       .seed = 7});
    sampler->set_epoch(2);
    return std::make_unique<data::DataLoader>(dataset, sampler, data::DataLoaderOptions{.batch_size = batch_size});
  };
  // The samples of each global batch (all ranks' k-th batches), from `from` on, sorted.
  auto global_batches = [](std::vector<std::unique_ptr<data::DataLoader>>& ranks, size_t from) {
    std::vector<std::vector<int64_t>> out;
    for (auto& loader : ranks) {
      size_t k = 0;
      for (const data::Example& b : *loader) {
        if (k >= from) {
          if (out.size() <= k - from) out.resize(k - from + 1);
          for (double v : b.target.to_vector()) out[k - from].push_back(static_cast<int64_t>(v));
        }
        ++k;
      }
    }
    for (auto& batch : out) std::sort(batch.begin(), batch.end());
    return out;
  };
  std::vector<std::unique_ptr<data::DataLoader>> two;
  for (int r = 0; r < 2; ++r) two.push_back(make(6, 2, r));
  const auto whole = global_batches(two, 0);  // 4 global batches of 12
  REQUIRE(whole.size() == 4);

  // Rank 0 of the two-rank run, stopped after one batch.
  auto saving = make(6, 2, 0);
  StateDict saved;
  for (const data::Example& b : *saving) {
    (void)b;
    saved = saving->state_dict();
    break;
  }
  std::vector<std::unique_ptr<data::DataLoader>> three;
  for (int r = 0; r < 3; ++r) {
    three.push_back(make(4, 3, r));
    three.back()->load_state_dict(saved);
    three.back()->sampler().set_epoch(2);
  }
  const auto rest = global_batches(three, 0);
  REQUIRE(rest.size() == 3);
  for (size_t k = 0; k < rest.size(); ++k) CHECK(rest[k] == whole[k + 1]);
  // Another global batch (3 x 5 = 15) would start elsewhere in the epoch: refused.
  CHECK_THROWS_WITH_AS(make(5, 3, 0)->load_state_dict(saved), doctest::Contains("global batch 12"), Error);
}

TEST_CASE("the random state round-trips the default and dropout generators, 64-bit seeds exactly") {
  const uint64_t seed = (1ULL << 63) + 12345;  // more bits than a double holds
  manual_seed(seed);
  Generator& g = default_generator();
  g.advance(77);
  dropout_generator().advance(5);
  const StateDict state = random_state_dict();
  const uint64_t dropout_seed_before = dropout_generator().seed();
  manual_seed(1);
  load_random_state_dict(state);
  CHECK(default_generator().seed() == seed);
  CHECK(default_generator().offset() == 77);
  CHECK(dropout_generator().seed() == dropout_seed_before);
  CHECK(dropout_generator().offset() == 5);
  manual_seed(0);
}

TEST_CASE("TrainingCheckpoint: components, counters, metadata, strictness and a refused load that changes nothing") {
  const std::string path = temp_path("components");
  auto model = mlp(1);
  optim::AdamW opt(model->parameters(), {.lr = 0.01});
  optim::GradScaler scaler({.init_scale = 256});
  int64_t step = 0;
  one_step(*model, opt, 5);
  step = 1;
  scaler.set_state(128, 3);
  optim::TrainingCheckpoint ck;
  ck.add("model", *model).add_optimizer("optimizer", opt, *model).add("scaler", scaler).add("step", step);
  ck.metadata["note"] = std::string("warm-up done");
  ck.metadata["tokens"] = int64_t{1} << 40;
  ck.metadata["loss"] = 0.625;
  CHECK(ck.save(path));
  const StateDict saved_model = model->state_dict();
  std::vector<Tensor> saved_values;
  for (const auto& [k, t] : saved_model) saved_values.push_back(t.clone());

  // A second run: other weights, other counters; load restores all of it.
  auto model2 = mlp(2);
  optim::AdamW opt2(model2->parameters(), {.lr = 0.3});
  optim::GradScaler scaler2;
  int64_t step2 = 0;
  optim::TrainingCheckpoint ck2;
  ck2.add("model", *model2).add_optimizer("optimizer", opt2, *model2).add("scaler", scaler2).add("step", step2);
  const optim::CheckpointReport report = ck2.load(path);
  CHECK(report.all_matched());
  CHECK(report.describe().find("loaded model, optimizer, scaler, step, rng") != std::string::npos);
  CHECK(step2 == 1);
  CHECK(scaler2.get_scale() == 128);
  CHECK(scaler2.growth_tracker() == 3);
  CHECK(opt2.lr() == doctest::Approx(0.01));
  for (size_t i = 0; i < saved_values.size(); ++i) CHECK(equal(model2->state_dict()[i].second, saved_values[i]));
  CHECK(std::get<std::string>(ck2.metadata.at("note")) == "warm-up done");
  CHECK(std::get<int64_t>(ck2.metadata.at("tokens")) == int64_t{1} << 40);
  CHECK(std::get<double>(ck2.metadata.at("loss")) == 0.625);

  // A component the file lacks: an error under strict, skipped and reported without.
  int64_t epoch = 7;
  optim::TrainingCheckpoint ck3;
  ck3.add("model", *model2).add("epoch", epoch);
  CHECK_THROWS_WITH_AS(ck3.load(path), doctest::Contains("not in the file (left as they were): epoch"), Error);
  const optim::CheckpointReport partial = ck3.load(path, {.strict = false});
  CHECK(partial.missing == std::vector<std::string>{"epoch"});
  CHECK(partial.unexpected == std::vector<std::string>{"optimizer", "scaler", "step"});
  CHECK(epoch == 7);

  // The optimizer refuses (another model shape): the model, loaded first, is put back.
  auto wide = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 2)});
  auto narrow_opt_model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 5), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(5, 2)});
  optim::Adam other_opt(narrow_opt_model->parameters(), {.lr = 0.01});
  const Tensor wide_before = wide->parameters()[0].clone();
  optim::TrainingCheckpoint ck4;
  ck4.add("model", *wide).add_optimizer("optimizer", other_opt, *narrow_opt_model);
  CHECK_THROWS_WITH_AS(ck4.load(path, {.strict = false}), doctest::Contains("has shape"), Error);
  CHECK(equal(wide->parameters()[0], wide_before));

  CHECK_THROWS_WITH_AS(ck4.add("rng", step), doctest::Contains("reserved"), Error);
  CHECK_THROWS_WITH_AS(ck4.add("model", step), doctest::Contains("added twice"), Error);
  fs::remove(path);
}

TEST_CASE("TrainingCheckpoint loads a file of the older hand-assembled layout, and says so") {
  const std::string path = temp_path("legacy");
  auto model = mlp(1);
  optim::Adam opt(model->parameters(), {.lr = 0.01});
  one_step(*model, opt, 5);
  auto value = [](double v) { return scalar_tensor(v, {.dtype = DType::f64}); };
  StateDict old = nn::with_prefix(model->state_dict(), "model.");
  for (auto& e : nn::with_prefix(opt.state_dict(), "optimizer.")) old.push_back(e);
  old.emplace_back("scaler.scale", value(512));
  old.emplace_back("scaler.growth", value(4));
  old.emplace_back("progress.step", value(9));
  old.emplace_back("rng.seed", value(31));
  old.emplace_back("rng.offset", value(40));
  nn::save_checkpoint(path, old);

  auto model2 = mlp(2);
  optim::Adam opt2(model2->parameters(), {.lr = 0.01});
  optim::GradScaler scaler;
  int64_t step = 0;
  optim::TrainingCheckpoint ck;
  ck.add("model", *model2).add_optimizer("optimizer", opt2, *model2).add("scaler", scaler).add("step", step);
  const optim::CheckpointReport report = ck.load(path);
  CHECK(report.legacy_layout);
  CHECK(report.describe().find("legacy layout") != std::string::npos);
  CHECK(step == 9);
  CHECK(scaler.get_scale() == 512);
  CHECK(default_generator().seed() == 31);
  CHECK(default_generator().offset() == 40);
  CHECK(equal(model2->parameters()[0], model->parameters()[0]));
  CHECK(equal(opt2.state_dict()[1].second, opt.state_dict()[1].second));
  manual_seed(0);
  fs::remove(path);
}
