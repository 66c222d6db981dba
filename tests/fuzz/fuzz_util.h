// What the fuzz targets share (tests/fuzz, docs/reliability.md): the input as a file, since the
// parsers read files, and the rule every parser of outside bytes keeps.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace ringgrad::fuzz {

// A scratch folder of this process's own (libFuzzer may run several workers side by side).
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("ringgrad_fuzz." + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return dir;
}

// Writes bytes to scratch_dir()/name and returns the path.
inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
  return path;
}

// The checkpoint targets' input: the first byte picks how the rest becomes the file --
//   even: as it is;
//   odd:  with its last 4 bytes replaced by the CRC-32 of the others, so that a mutation inside
//         the file still passes the checksum and the parser's own checks are what meet it.
// Without the second form nearly every mutation would stop at the checksum.
inline std::string checkpoint_bytes(const uint8_t* data, size_t size) {
  if (size < 1) return {};
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 1 && bytes.size() >= 4) {
    const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size() - 4));
    const uint32_t crc32_value = static_cast<uint32_t>(crc);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc32_value, 4);  // little-endian, as the format
  }
  return bytes;
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The rule: `parse` either succeeds or throws a ringgrad::Error whose message contains `must_name`
// (the file's path, or a flag's "--"). Any other exception, or an error that does not say what it
// is about, is a finding (abort, which libFuzzer reports and saves as a crash input). Crashes,
// hangs (-timeout) and oversized allocations (-malloc_limit_mb) libFuzzer and ASan catch themselves.
template <class F>
void expect_success_or_clear_error(const std::string& must_name, F&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find(must_name) == std::string::npos)
      finding("the error does not name '" + must_name + "': " + message);
  } catch (const std::exception& e) {
    finding(std::string("not a ringgrad::Error: ") + e.what());
  } catch (...) {
    finding("a non-std exception");
  }
}

}  // namespace ringgrad::fuzz
