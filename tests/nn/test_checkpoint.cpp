// Checkpoints: round trip, exact resume, and rejection of damaged files without touching the model.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
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
      CHECK_MESSAGE(std::string(e.what()).find(path) != std::string::npos, "the error names the file: ", e.what());
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

namespace {

// CRC-32 (the IEEE polynomial zlib uses), bit by bit: an independent reference for crafted files.
uint32_t crc32_reference(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

template <class T>
void put_raw(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// A checkpoint with one f32 entry "x" of the given dimensions and byte count, correctly checksummed,
// so that the loader gets past the CRC and must judge the header's numbers themselves.
std::string crafted_checkpoint(const std::vector<int64_t>& dims, uint64_t nbytes) {
  std::string out("RGCKPT\0\1", 8);
  put_raw<uint32_t>(out, 1);  // version
  put_raw<uint32_t>(out, 1);  // one entry
  put_raw<uint32_t>(out, 1);
  out += "x";
  put_raw<uint8_t>(out, static_cast<uint8_t>(DType::f32));
  put_raw<uint8_t>(out, static_cast<uint8_t>(dims.size()));
  for (int64_t d : dims) put_raw<int64_t>(out, d);
  put_raw<uint64_t>(out, nbytes);
  put_raw<uint32_t>(out, crc32_reference(out));
  return out;
}

}  // namespace

TEST_CASE("a checkpoint header whose sizes overflow is an error naming the file and the entry") {
  const std::string path = temp_path("crafted");
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  // The reference CRC agrees with the writer's (zlib) on a real file.
  nn::save_checkpoint(path, {{"x", ones({2})}});
  {
    std::ifstream in(path, std::ios::binary);
    const std::string real((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint32_t stored;
    std::memcpy(&stored, real.data() + real.size() - 4, 4);
    REQUIRE(crc32_reference(real.substr(0, real.size() - 4)) == stored);
  }
  // 4 x 2^31 x 2^31 elements wrap to 0, which a 0-byte entry would have matched.
  write(crafted_checkpoint({4, int64_t{1} << 31, int64_t{1} << 31}, 0));
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path), doctest::Contains("entry 'x' has shape (4, 2147483648, 2147483648)"),
                       Error);
  // 2^62 f32 elements: 2^64 bytes, wrapping to 0.
  write(crafted_checkpoint({int64_t{1} << 62}, 0));
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path), doctest::Contains("needs more than 2^64 bytes"), Error);
  // A byte count near 2^64 that matches its shape: pos + nbytes would wrap; the file is far shorter.
  write(crafted_checkpoint({int64_t{1} << 60, 2}, uint64_t{1} << 63));
  CHECK_THROWS_WITH_AS(nn::load_checkpoint(path), doctest::Contains("file truncated while reading tensor data"), Error);
  fs::remove(path);
}

namespace {

// The message of the Error fn throws (failing the test when it throws none).
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected an error");
  return {};
}

}  // namespace

TEST_CASE("checkpoint destinations: a bad one is refused before any save, a failed save leaves nothing behind") {
  const fs::path dir = temp_path("dest");
  fs::create_directories(dir);
  const StateDict state{{"w", ones({2, 2})}};
  // Refused up front, each with the path and the reason.
  CHECK(error_of([&] { nn::check_checkpoint_destination(""); }).find("empty") != std::string::npos);
  CHECK(error_of([&] { nn::check_checkpoint_destination(dir.string()); }).find(dir.string() + " is a directory") !=
        std::string::npos);
  const std::string in_missing = (dir / "no-such-folder" / "ck.bin").string();
  CHECK(error_of([&] { nn::check_checkpoint_destination(in_missing); }).find("does not exist") != std::string::npos);
  // A good destination passes and leaves no file behind.
  const std::string good = (dir / "ck.bin").string();
  nn::check_checkpoint_destination(good);
  CHECK(fs::is_empty(dir));

  // Loading a directory names it (it used to surface as "basic_filebuf::underflow ... Is a directory").
  const std::string load_dir = error_of([&] { nn::load_checkpoint(dir.string()); });
  CHECK_MESSAGE(load_dir.find(dir.string() + " is a directory") != std::string::npos, load_dir);
  CHECK(error_of([&] { nn::load_checkpoint((dir / "absent").string()); }).find("No such file") != std::string::npos);

  // The rename fails (the destination is a non-empty directory): the temporary file is removed.
  const fs::path occupied = dir / "occupied";
  fs::create_directories(occupied / "inside");
  const std::string rename_error = error_of([&] { nn::save_checkpoint(occupied.string(), state); });
  CHECK_MESSAGE(rename_error.find("renaming") != std::string::npos, rename_error);
  CHECK(!fs::exists(occupied.string() + ".tmp"));
  CHECK(fs::is_directory(occupied / "inside"));

  // TrainingCheckpoint::check_destination refuses the same way (a world of one: no collective).
  nn::Linear model(2, 2);
  optim::TrainingCheckpoint checkpoint;
  checkpoint.add("model", model);
  CHECK(error_of([&] { checkpoint.check_destination(in_missing); }).find("does not exist") != std::string::npos);
  checkpoint.check_destination(good);
  fs::remove_all(dir);
}
