#include "nn/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/file_io.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad::nn {
namespace {

constexpr char kMagic[8] = {'R', 'G', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr uint32_t kVersion = 1;

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// A bounds-checked reader over the file's bytes.
struct Reader {
  const std::string& bytes;
  const std::string& path;
  size_t pos = 0;
  void need(size_t n, const char* what) {
    // n <= size - pos, not pos + n <= size: a byte count read from the file may be near 2^64, and
    // the sum would wrap around and pass.
    RG_CHECK(pos <= bytes.size() && n <= bytes.size() - pos, "load_checkpoint", path, ": file truncated while reading ",
             what, " (at byte ", pos, " of ", bytes.size(), ")");
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
};

// zlib's crc32 takes a 32-bit length: a file of 4 GiB or more is checksummed in pieces, so that no
// byte of it goes unchecked.
uint32_t crc32_of(const char* data, size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t at = 0; at < size; at += kPiece)
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data + at), static_cast<uInt>(std::min(kPiece, size - at)));
  return static_cast<uint32_t>(crc);
}

}  // namespace

void check_checkpoint_destination(const std::string& path) {
  namespace fs = std::filesystem;
  RG_CHECK(!path.empty(), "checkpoint", "the checkpoint path is empty");
  std::error_code ec;
  RG_CHECK(!fs::is_directory(path, ec), "checkpoint", path, " is a directory; give a file name inside it");
  const fs::path parent = fs::path(path).parent_path();
  RG_CHECK(parent.empty() || fs::is_directory(parent, ec), "checkpoint", "cannot save to ", path, ": its folder ",
           parent.string(), " does not exist");
  // The same file a save creates first: proof that this process may create it there.
  const std::string tmp = temporary_path(path);
  const bool existed = fs::exists(tmp, ec);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT, 0644);
  RG_CHECK(fd >= 0, "checkpoint", "cannot save to ", path, ": creating ", tmp, " failed: ", std::strerror(errno));
  ::close(fd);
  if (!existed) std::remove(tmp.c_str());
}

void save_checkpoint(const std::string& path, const StateDict& entries) {
  std::string out(kMagic, sizeof kMagic);
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, static_cast<uint32_t>(entries.size()));
  for (const auto& [name, tensor] : entries) {
    Tensor t = native::contiguous(tensor.to(Device::cpu()));
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<uint8_t>(out, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(out, static_cast<uint8_t>(t.dim()));
    for (int64_t d : t.shape()) put<int64_t>(out, d);
    put<uint64_t>(out, t.nbytes());
    out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  put<uint32_t>(out, crc32_of(out.data(), out.size()));

  write_file_atomically(path, out, "save_checkpoint");
}

StateDict load_checkpoint(const std::string& path) {
  const std::string bytes = read_whole_file(path, "load_checkpoint");
  Reader r{bytes, path};
  r.need(sizeof kMagic, "the magic number");
  RG_CHECK(std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0, "load_checkpoint", path,
           ": not a ringgrad checkpoint (bad magic number)");
  r.pos = sizeof kMagic;
  const uint32_t version = r.get<uint32_t>("the version");
  RG_CHECK(version == kVersion, "load_checkpoint", path, ": format version ", version, ", this build reads ", kVersion);
  RG_CHECK(bytes.size() >= 4, "load_checkpoint", path, ": file truncated");
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const uint32_t crc = crc32_of(bytes.data(), bytes.size() - 4);
  // Checked before parsing, so any damaged byte is reported as such rather than as a strange size.
  RG_CHECK(crc == stored_crc, "load_checkpoint", path, ": checksum mismatch: the file (", bytes.size(),
           " bytes) is corrupt or truncated");
  const uint32_t count = r.get<uint32_t>("the entry count");
  StateDict entries;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t name_len = r.get<uint32_t>("an entry name length");
    r.need(name_len, "an entry name");
    std::string name = bytes.substr(r.pos, name_len);
    r.pos += name_len;
    const uint8_t dtype = r.get<uint8_t>("a dtype");
    RG_CHECK(dtype <= static_cast<uint8_t>(DType::u8), "load_checkpoint", path, ": entry '", name,
             "' has unknown dtype code ", int(dtype));
    const uint8_t ndim = r.get<uint8_t>("a rank");
    RG_CHECK(ndim <= 8, "load_checkpoint", path, ": entry '", name, "' has ", int(ndim), " dims");
    Shape shape(ndim);
    for (auto& d : shape) {
      d = r.get<int64_t>("a dimension");
      RG_CHECK(d >= 0, "load_checkpoint", path, ": entry '", name, "' has a negative dimension");
    }
    const uint64_t nbytes = r.get<uint64_t>("a byte count");
    const DType dt = static_cast<DType>(dtype);
    // Checked products: dimensions from the file must not wrap around to a small element count.
    // The product of the dimensions with zeros counted as one (the strides' extent) must fit too:
    // (0, 2^62, 2^62) holds no element, but its strides would overflow.
    int64_t numel = 1, extent = 1;
    uint64_t needed = 0;
    for (int64_t d : shape) {
      RG_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent), "load_checkpoint", path, ": entry '",
               name, "' has shape ", shape_str(shape), ", whose element count overflows 64 bits");
      numel *= d;  // cannot overflow: |numel| <= extent
    }
    RG_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(dt), &needed), "load_checkpoint", path,
             ": entry '", name, "' of shape ", shape_str(shape), " ", dtype_name(dt), " needs more than 2^64 bytes");
    RG_CHECK(nbytes == needed, "load_checkpoint", path, ": entry '", name, "' holds ", nbytes, " bytes, but ",
             shape_str(shape), " ", dtype_name(dt), " needs ", needed);
    r.need(nbytes, "tensor data");
    r.need(nbytes + 4, "tensor data and the trailer");  // nbytes fits in the file, so + 4 cannot wrap
    entries.emplace_back(std::move(name), from_blob(bytes.data() + r.pos, shape, dt, {.dtype = dt}));
    r.pos += nbytes;
  }
  RG_CHECK(r.pos + 4 == bytes.size(), "load_checkpoint", path, ": ", bytes.size() - r.pos - 4,
           " unexpected bytes after the last entry");
  return entries;
}

double scalar_entry(const StateDict& state, const std::string& name) {
  for (const auto& [n, t] : state)
    if (n == name) return t.item();
  RG_FAIL("checkpoint", "entry '", name, "' is missing");
}

}  // namespace ringgrad::nn
