// TensorBoard event files (core/summary_writer.h): CRC-32C against its published check value, and a
// scalar event's bytes against the protocol-buffer encoding worked out by hand. The files' reading by
// a protobuf-generated parser is tests/interop/test_tensorboard_events.py.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ringgrad.h"

using namespace ringgrad;
namespace fs = std::filesystem;

namespace {

// The records of a TFRecord file: each one's data, after checking both masked CRCs.
std::vector<std::string> records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto masked = [](uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; };
  std::vector<std::string> out;
  for (size_t at = 0; at < blob.size();) {
    REQUIRE(blob.size() - at >= 16);
    uint64_t n = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&n, blob.data() + at, 8);
    std::memcpy(&length_crc, blob.data() + at + 8, 4);
    REQUIRE(blob.size() - at - 16 >= n);
    std::memcpy(&data_crc, blob.data() + at + 12 + n, 4);
    CHECK(length_crc == masked(crc32c(blob.data() + at, 8)));
    CHECK(data_crc == masked(crc32c(blob.data() + at + 12, n)));
    out.push_back(blob.substr(at + 12, n));
    at += 16 + n;
  }
  return out;
}

}  // namespace

TEST_CASE("summary writer: CRC-32C gives the algorithm's check value") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
}

TEST_CASE("summary writer: a scalar event is the hand-encoded Event, framed as a TFRecord") {
  const fs::path dir = fs::temp_directory_path() / ("ringgrad_tb_" + std::to_string(::getpid()));
  std::string path;
  {
    SummaryWriter tb(dir.string());
    path = tb.path();
    tb.add_scalar("a", 0.5, 3);
  }
  CHECK(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  const std::vector<std::string> r = records(path);
  fs::remove_all(dir);
  REQUIRE(r.size() == 2);
  // Event 1: wall_time (field 1, 8 bytes: key 0x09), file_version (field 3, key 0x1A) "brain.Event:2".
  CHECK(r[0].size() == 9 + 2 + 13);
  CHECK(static_cast<unsigned char>(r[0][0]) == 0x09);
  CHECK(r[0].substr(9) == std::string("\x1a\x0d") + "brain.Event:2");
  // Event 2: wall_time; step 3 (field 2 varint: 0x10 0x03); summary (field 5, key 0x2A, 10 bytes):
  // value (field 1, key 0x0A, 8 bytes): tag "a" (0x0A 0x01 'a'), simple_value 0.5f (field 2, 4 bytes:
  // key 0x15, then 00 00 00 3F).
  const std::string value = std::string(
      "\x0a\x01"
      "a"
      "\x15\x00\x00\x00\x3f",
      8);
  const std::string expected = std::string("\x10\x03\x2a\x0a\x0a\x08", 6) + value;
  REQUIRE(r[1].size() == 9 + expected.size());
  CHECK(static_cast<unsigned char>(r[1][0]) == 0x09);
  CHECK(r[1].substr(9) == expected);
}

TEST_CASE("summary writer: a folder that cannot be made is an error naming it") {
  const fs::path file = fs::temp_directory_path() / ("ringgrad_tb_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  const std::string where = file.string();
  CHECK_THROWS_WITH_AS(SummaryWriter((file / "runs").string()), doctest::Contains(where.c_str()), Error);
  fs::remove(file);
}
