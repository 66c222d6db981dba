// Checkpoints: round trip, exact resume, and rejection of damaged files without touching the model.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ringgrad.h"

using namespace ringgrad;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ringgrad_ck_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A small regression trained with Adam; the batch of step t depends only on t.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  Run() {
    manual_seed(11);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(8, 1)});
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
  }
  double step(int t) {
    Generator g(100 + static_cast<uint64_t>(t));
    Tensor x = randn({16, 3}, g);
    Tensor y = tanh(x.sum({1}, true));
    Tensor loss = nn::F::mse_loss(model->forward(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
    return loss.item();
  }
  nn::StateDict checkpoint() const {
    nn::StateDict ck = nn::with_prefix(model->state_dict(), "model.");
    for (auto& e : nn::with_prefix(opt->state_dict(), "optimizer.")) ck.push_back(e);
    return ck;
  }
  void restore(const nn::StateDict& ck) {
    model->load_state_dict(nn::with_prefix_removed(ck, "model."));
    opt->load_state_dict(nn::with_prefix_removed(ck, "optimizer."));
  }
};

}  // namespace

TEST_CASE("save and load round-trip every dtype, shape and value exactly") {
  const std::string path = temp_path("roundtrip");
  nn::StateDict entries{{"a", arange(0, 6).reshape({2, 3})},
                        {"b.half", from_vector(std::vector<double>{1.5, -2, 65504}, {3}, {.dtype = DType::f16})},
                        {"c", from_vector(std::vector<int64_t>{-7, 1LL << 40}, {2})},
                        {"scalar", scalar_tensor(3.25, {.dtype = DType::f64})},
                        {"view", arange(0, 12).reshape({3, 4}).t()}};
  nn::save_checkpoint(path, entries);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  nn::StateDict loaded = nn::load_checkpoint(path);
  REQUIRE(loaded.size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    CHECK(loaded[i].first == entries[i].first);
    CHECK(loaded[i].second.dtype() == entries[i].second.dtype());
    CHECK(equal(loaded[i].second, entries[i].second));
  }
  fs::remove(path);
}

TEST_CASE("resuming at step 10 reproduces steps 11-20 of an uninterrupted run exactly") {
  const std::string path = temp_path("resume");
  Run straight;
  std::vector<double> expected;
  for (int t = 0; t < 20; ++t) {
    const double loss = straight.step(t);
    if (t >= 10) expected.push_back(loss);
  }
  Run first;
  for (int t = 0; t < 10; ++t) first.step(t);
  nn::save_checkpoint(path, first.checkpoint());
  Run resumed;  // fresh weights and optimizer state, then the checkpoint
  resumed.restore(nn::load_checkpoint(path));
  for (int t = 10; t < 20; ++t) CHECK(resumed.step(t) == expected[static_cast<size_t>(t - 10)]);
  fs::remove(path);
}

TEST_CASE("truncated, corrupt or mismatched checkpoints are rejected and leave the model untouched") {
  const std::string path = temp_path("damaged");
  Run run;
  run.step(0);
  nn::save_checkpoint(path, run.checkpoint());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  Run victim;
  const Tensor before = victim.model->parameters()[0].clone().detach();
  auto expect_error = [&](const std::string& content, const std::string& fragment) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    try {
      victim.restore(nn::load_checkpoint(path));
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(fragment) != std::string::npos, std::string(e.what()));
    }
    CHECK(equal(victim.model->parameters()[0], before));
  };
  expect_error(bytes.substr(0, bytes.size() / 2), "truncated");
  std::string flipped = bytes;
  flipped[bytes.size() - 10] ^= 0x5a;  // inside the last tensor's data
  expect_error(flipped, "checksum mismatch");
  expect_error("not a checkpoint at all", "bad magic");
  // A checkpoint of another architecture: load_state_dict refuses before copying anything.
  nn::Linear other(5, 5);
  nn::save_checkpoint(path, nn::with_prefix(other.state_dict(), "model."));
  try {
    victim.model->load_state_dict(nn::with_prefix_removed(nn::load_checkpoint(path), "model."));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("missing keys") != std::string::npos);
  }
  CHECK(equal(victim.model->parameters()[0], before));
  fs::remove(path);
}
