// The IDX reader on files written here: raw and gzip, and seven kinds of bad file.
#include <doctest/doctest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ringgrad.h"

using namespace ringgrad;
namespace fs = std::filesystem;

namespace {

std::string idx_bytes(std::vector<uint32_t> dims, size_t data_bytes, unsigned char type = 0x08) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  for (size_t i = 0; i < data_bytes; ++i) s.push_back(static_cast<char>(i % 251));
  return s;
}

fs::path temp_dir() {
  fs::path dir = fs::temp_directory_path() / ("ringgrad_idx_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string write_raw(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

std::string write_gz(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.string().c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return path.string();
}

std::string error_of(const std::string& path) {
  try {
    data::read_idx(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("read_idx reads raw and gzip files into u8 tensors of the header's dims") {
  const fs::path dir = temp_dir();
  const std::string bytes = idx_bytes({3, 2, 4}, 24);
  for (const std::string& path : {write_raw(dir / "a.idx", bytes), write_gz(dir / "a.idx.gz", bytes)}) {
    Tensor t = data::read_idx(path);
    CHECK(t.dtype() == DType::u8);
    CHECK(t.shape() == Shape{3, 2, 4});
    CHECK(t.to_vector()[23] == 23.0);
  }
  fs::remove_all(dir);
}

TEST_CASE("read_idx rejects bad files with messages naming the file and the problem") {
  const fs::path dir = temp_dir();
  CHECK(error_of((dir / "nope").string()).find("file not found") != std::string::npos);
  const std::string short_header = write_raw(dir / "short", std::string("\0\0", 2));
  CHECK(error_of(short_header).find("too short") != std::string::npos);
  CHECK(error_of(short_header).find(short_header) != std::string::npos);
  std::string bad_magic = idx_bytes({4}, 4);
  bad_magic[0] = 'P';
  CHECK(error_of(write_raw(dir / "magic", bad_magic)).find("bad magic number") != std::string::npos);
  CHECK(error_of(write_raw(dir / "type", idx_bytes({4}, 16, 0x0D))).find("not supported") != std::string::npos);
  const std::string truncated = idx_bytes({10, 10}, 60);
  CHECK(error_of(write_gz(dir / "trunc.gz", truncated)).find("data truncated") != std::string::npos);
  CHECK(error_of(write_raw(dir / "trail", idx_bytes({4}, 5))).find("trailing bytes") != std::string::npos);
  // Headers that ask for more than the file holds fail before anything is allocated: a 20-byte file of
  // three dimensions of 2^32 - 1 (2^96 bytes), and 2^30 bytes claimed by a file of 16.
  const std::string huge = idx_bytes({0xffffffffu, 0xffffffffu, 0xffffffffu}, 4);
  CHECK(huge.size() == 20);
  CHECK(error_of(write_raw(dir / "huge", huge)).find("more than 2^64 bytes") != std::string::npos);
  CHECK(error_of(write_gz(dir / "huge.gz", huge)).find("more than 2^64 bytes") != std::string::npos);
  const std::string liar = idx_bytes({1u << 15, 1u << 15}, 4);
  CHECK(error_of(write_raw(dir / "liar", liar)).find("header says (32768, 32768) = 1073741824 bytes, file holds 4") !=
        std::string::npos);
  CHECK(error_of(write_gz(dir / "liar.gz", liar)).find("file holds at most") != std::string::npos);
  std::string cut_dims = idx_bytes({4, 4}, 0).substr(0, 6);
  CHECK(error_of(write_raw(dir / "dims", cut_dims)).find("header truncated") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("load_mnist checks that image and label counts agree") {
  const fs::path dir = temp_dir();
  write_raw(dir / "train-images-idx3-ubyte", idx_bytes({5, 2, 2}, 20));
  write_raw(dir / "train-labels-idx1-ubyte", idx_bytes({5}, 5));
  write_raw(dir / "t10k-images-idx3-ubyte", idx_bytes({3, 2, 2}, 12));
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_bytes({4}, 4));
  try {
    data::load_mnist(dir.string());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("holds 3 images but") != std::string::npos);
  }
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_bytes({3}, 3));
  data::Mnist m = data::load_mnist(dir.string());
  CHECK(m.train.images.shape() == Shape{5, 1, 2, 2});
  CHECK(m.test.labels.dtype() == DType::i64);
  // Normalised with the training pixels' statistics: train mean 0, std 1.
  CHECK(m.train.images.mean().item() == doctest::Approx(0.0).epsilon(1e-5));
  fs::remove_all(dir);
}
