#include "core/summary_writer.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/error.h"

namespace ringgrad {
namespace {

static_assert(std::endian::native == std::endian::little, "TFRecord lengths and CRCs are little-endian");

// ---- protocol buffers: the wire format of the few fields an event needs ----------------------------
// A field is a key (field number << 3 | wire type) then its value: 0 = varint, 1 = 8 bytes,
// 2 = length-delimited (strings, bytes, nested messages), 5 = 4 bytes.
class Proto {
 public:
  Proto& varint(int field, uint64_t v) {
    key(field, 0);
    put_varint(v);
    return *this;
  }
  Proto& f64(int field, double v) {
    key(field, 1);
    append(&v, 8);
    return *this;
  }
  Proto& f32(int field, float v) {
    key(field, 5);
    append(&v, 4);
    return *this;
  }
  Proto& bytes(int field, std::string_view v) {
    key(field, 2);
    put_varint(v.size());
    out_ += v;
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
  void key(int field, int wire) { put_varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
  void put_varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_ += static_cast<char>((v & 0x7F) | 0x80);
    out_ += static_cast<char>(v);
  }
  void append(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
};

// Field numbers of tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto.
namespace event {
constexpr int wall_time = 1, step = 2, file_version = 3, summary = 5;
}
namespace summary {
constexpr int value = 1;
}
namespace value {
constexpr int tag = 1, simple_value = 2, tensor = 8, metadata = 9;
}
constexpr int kPluginData = 1, kPluginName = 1;                          // SummaryMetadata, PluginData
constexpr int kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;  // TensorProto
constexpr int kShapeDim = 2, kDimSize = 1;                               // TensorShapeProto, its Dim
constexpr uint64_t kDtString = 7;                                        // DataType DT_STRING

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event_with(int64_t step, const std::string& summary_value) {
  return Proto()
      .f64(event::wall_time, now_seconds())
      .varint(event::step, static_cast<uint64_t>(step))
      .bytes(event::summary, Proto().bytes(summary::value, summary_value).str())
      .str();
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

SummaryWriter::SummaryWriter(const std::string& log_dir, const std::string& filename_suffix) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  RG_CHECK(!ec, "SummaryWriter", "cannot create the log folder ", log_dir, ": ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  // The pid too, as PyTorch's writer: two writers started in one second must not share a file.
  path_ =
      (std::filesystem::path(log_dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) +
                                         "." + host + "." + std::to_string(::getpid()) + filename_suffix))
          .string();
  file_ = std::fopen(path_.c_str(), "wb");
  RG_CHECK(file_ != nullptr, "SummaryWriter", "cannot create ", path_, ": ", std::strerror(errno));
  try {
    write_event(Proto().f64(event::wall_time, now_seconds()).bytes(event::file_version, "brain.Event:2").str());
  } catch (...) {
    std::fclose(file_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

SummaryWriter::~SummaryWriter() {
  if (file_) std::fclose(file_);
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  write_event(
      event_with(step, Proto().bytes(value::tag, tag).f32(value::simple_value, static_cast<float>(value)).str()));
}

void SummaryWriter::add_text(const std::string& tag, const std::string& text, int64_t step) {
  const std::string metadata = Proto().bytes(kPluginData, Proto().bytes(kPluginName, "text").str()).str();
  const std::string tensor = Proto()
                                 .varint(kTensorDtype, kDtString)
                                 .bytes(kTensorShape, Proto().bytes(kShapeDim, Proto().varint(kDimSize, 1).str()).str())
                                 .bytes(kTensorStringVal, text)
                                 .str();
  write_event(
      event_with(step,
                 Proto().bytes(value::tag, tag).bytes(value::metadata, metadata).bytes(value::tensor, tensor).str()));
}

void SummaryWriter::write_event(const std::string& event) {
  std::string record(8, '\0');
  const uint64_t length = event.size();
  std::memcpy(record.data(), &length, 8);
  const uint32_t length_crc = masked(crc32c(record.data(), 8)), data_crc = masked(crc32c(event.data(), event.size()));
  record.append(reinterpret_cast<const char*>(&length_crc), 4);
  record += event;
  record.append(reinterpret_cast<const char*>(&data_crc), 4);
  const bool ok = std::fwrite(record.data(), 1, record.size(), file_) == record.size() && std::fflush(file_) == 0;
  RG_CHECK(ok, "SummaryWriter", "writing to ", path_, " failed: ", std::strerror(errno));
}

}  // namespace ringgrad
