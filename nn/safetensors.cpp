#include "nn/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <set>

#include "core/file_io.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad::nn {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian tensors; this build writes the host's bytes as they are");

constexpr const char* kOp = "load_safetensors";
constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr size_t kMaxDims = 8;                     // as checkpoints (nn/checkpoint.cpp)

// The format's dtype names for ringgrad's dtypes, in DType's order.
constexpr std::pair<DType, const char*> kDtypeNames[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i32, "I32"}, {DType::i64, "I64"}, {DType::u8, "U8"},
};

const char* format_name(DType t) {
  for (const auto& [dtype, name] : kDtypeNames)
    if (dtype == t) return name;
  RG_FAIL("save_safetensors", "no safetensors name for dtype ", dtype_name(t));
}

// ---- the header: the few JSON shapes the format uses ----------------------------------------------

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// A strict reader of the header's JSON: one object whose values are entries ({"dtype": string,
// "shape": [integers], "data_offsets": [integer, integer]}) or, under "__metadata__", an object of
// strings. No recursion deeper than that, so no input can exhaust the stack.
class HeaderReader {
 public:
  HeaderReader(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  SafetensorsMetadata metadata;
  std::vector<Entry> entries;

  void read() {
    if (text_.empty() || text_[0] != '{') fail("the header does not start with '{'");
    std::set<std::string> seen;
    pos_ = 1;
    skip_space();
    if (!consume('}')) {
      do {
        skip_space();
        std::string key = string("a tensor name");
        if (!seen.insert(key).second) fail("the name '" + key + "' appears twice");
        skip_space();
        expect(':');
        skip_space();
        if (key == "__metadata__") {
          read_metadata();
        } else {
          entries.push_back(read_entry(std::move(key)));
        }
        skip_space();
      } while (consume(','));
      expect('}');
    }
    skip_space();  // the padding
    if (pos_ != text_.size()) fail("unexpected characters after the header's object");
  }

 private:
  std::string_view text_;
  const std::string& origin_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    RG_FAIL(kOp, origin_, ": header (", text_.size(), " bytes), at byte ", pos_, ": ", what);
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }

  // A JSON string, escapes decoded to UTF-8.
  std::string string(const std::string& what) {
    if (!consume('"')) fail("expected " + what + " (a string)");
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("a string runs past the header's end");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("a string runs past the header's end");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, code_point()); break;
        default: fail(std::string("unknown escape \\") + e);
      }
    }
  }
  uint32_t hex4() {
    if (text_.size() - pos_ < 4) fail("a \\u escape needs four hex digits");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) fail("a \\u escape needs four hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }
  uint32_t code_point() {  // after "\u"; joins a surrogate pair
    const uint32_t hi = hex4();
    if (hi >= 0xDC00 && hi <= 0xDFFF) fail("a lone low surrogate in a \\u escape");
    if (hi < 0xD800 || hi > 0xDBFF) return hi;
    if (!consume('\\') || !consume('u')) fail("a high surrogate without its low half");
    const uint32_t lo = hex4();
    if (lo < 0xDC00 || lo > 0xDFFF) fail("a high surrogate without its low half");
    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // A non-negative integer that fits 63 bits; `what` names it in errors.
  uint64_t integer(const std::string& what) {
    if (consume('-')) fail(what + " is negative");
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') fail("expected " + what + " (an integer)");
    uint64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(text_[pos_++] - '0');
      if (v > (uint64_t{INT64_MAX} - digit) / 10) fail(what + " does not fit 63 bits");
      v = v * 10 + digit;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail(what + " is not an integer");
    return v;
  }
  std::vector<uint64_t> integers(const std::string& what, size_t at_most) {
    expect('[');
    std::vector<uint64_t> out;
    skip_space();
    if (consume(']')) return out;
    do {
      skip_space();
      if (out.size() == at_most) fail(what + " has more than " + std::to_string(at_most) + " values");
      out.push_back(integer(what));
      skip_space();
    } while (consume(','));
    expect(']');
    return out;
  }

  void read_metadata() {
    expect('{');
    skip_space();
    if (consume('}')) return;
    std::set<std::string> seen;
    do {
      skip_space();
      std::string key = string("a metadata key");
      if (!seen.insert(key).second) fail("the metadata key '" + key + "' appears twice");
      skip_space();
      expect(':');
      skip_space();
      if (pos_ < text_.size() && text_[pos_] != '"') fail("metadata value of '" + key + "' is not a string");
      metadata.emplace_back(std::move(key), string("a metadata value"));
      skip_space();
    } while (consume(','));
    expect('}');
  }

  Entry read_entry(std::string name) {
    Entry e;
    e.name = std::move(name);
    bool has_dtype = false, has_shape = false, has_offsets = false;
    expect('{');
    skip_space();
    if (!consume('}')) {
      do {
        skip_space();
        const std::string field = string("a field of '" + e.name + "'");
        skip_space();
        expect(':');
        skip_space();
        if (field == "dtype" && !has_dtype) {
          has_dtype = true;
          const std::string dtype = string("the dtype of '" + e.name + "'");
          const auto* it = std::find_if(std::begin(kDtypeNames), std::end(kDtypeNames),
                                        [&](const auto& p) { return dtype == p.second; });
          if (it == std::end(kDtypeNames))
            fail("'" + e.name + "' has dtype \"" + dtype + "\"; ringgrad reads F32 F64 F16 BF16 I32 I64 U8");
          e.dtype = it->first;
        } else if (field == "shape" && !has_shape) {
          has_shape = true;
          for (uint64_t d : integers("a dimension of '" + e.name + "'", kMaxDims))
            e.shape.push_back(static_cast<int64_t>(d));
        } else if (field == "data_offsets" && !has_offsets) {
          has_offsets = true;
          const auto offsets = integers("a data offset of '" + e.name + "'", 2);
          if (offsets.size() != 2) fail("'" + e.name + "' needs data_offsets [BEGIN, END]");
          e.begin = offsets[0];
          e.end = offsets[1];
        } else {
          fail("'" + e.name + "' has the field \"" + field + "\" " +
               (field == "dtype" || field == "shape" || field == "data_offsets" ? "twice" : "(unknown)"));
        }
        skip_space();
      } while (consume(','));
      expect('}');
    }
    if (!has_dtype || !has_shape || !has_offsets) fail("'" + e.name + "' needs dtype, shape and data_offsets");
    return e;
  }
};

// The bytes `e` must span: its element count times its dtype's size, with overflow checked (also of
// the dimensions with zeros counted as one, as a tensor's strides would be).
uint64_t bytes_needed(const Entry& e, const std::string& origin) {
  int64_t extent = 1;
  uint64_t numel = 1;
  for (int64_t d : e.shape) {
    RG_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent), kOp, origin, ": '", e.name,
             "' has shape ", shape_str(e.shape), ", whose element count overflows 64 bits");
    numel *= static_cast<uint64_t>(d);
  }
  uint64_t needed = 0;
  RG_CHECK(!__builtin_mul_overflow(numel, dtype_size(e.dtype), &needed), kOp, origin, ": '", e.name, "' of shape ",
           shape_str(e.shape), " needs more than 2^64 bytes");
  return needed;
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF):
// the specification's header is UTF-8 JSON, and readers in other languages decode it as such.
bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || s.size() - i < n) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

void append_json_string(std::string& out, const std::string& s) {
  RG_CHECK(is_utf8(s), "save_safetensors", "the header is UTF-8 JSON, and the name or metadata \"", s.substr(0, 40),
           "\" is not valid UTF-8");
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xF];
      out += hex[c & 0xF];
    } else {
      out += c;
    }
  }
  out += '"';
}

}  // namespace

std::string serialize_safetensors(const StateDict& entries, const SafetensorsMetadata& metadata) {
  SafetensorsMetadata meta{{"format", "pt"}};
  std::set<std::string> keys;
  for (const auto& [key, value] : metadata) {
    RG_CHECK(keys.insert(key).second, "save_safetensors", "the metadata key '", key, "' twice");
    if (key == "format") meta[0].second = value;
    else meta.emplace_back(key, value);
  }
  std::set<std::string> names;
  std::string header = "{\"__metadata__\":{";
  for (size_t i = 0; i < meta.size(); ++i) {
    if (i) header += ',';
    append_json_string(header, meta[i].first);
    header += ':';
    append_json_string(header, meta[i].second);
  }
  header += '}';
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : entries) {
    RG_CHECK(name != "__metadata__" && names.insert(name).second, "save_safetensors",
             name == "__metadata__" ? "the name __metadata__ is the format's own" : "the name '" + name + "' twice");
    Tensor t = native::contiguous(tensor.to(Device::cpu()));
    header += ',';
    append_json_string(header, name);
    header += ":{\"dtype\":\"";
    header += format_name(t.dtype());
    header += "\",\"shape\":[";
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d) header += ',';
      header += std::to_string(t.shape()[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes()) + "]}";
    offset += t.nbytes();
    data.push_back(std::move(t));
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.reserve(out.size() + offset);
  for (const Tensor& t : data) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& origin) {
  RG_CHECK(bytes.size() >= 8, kOp, origin, ": ", bytes.size(), " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  RG_CHECK(n <= bytes.size() - 8, kOp, origin, ": the header claims ", n, " bytes, but the file has ", bytes.size() - 8,
           " after the length");
  RG_CHECK(n <= kMaxHeaderBytes, kOp, origin, ": a header of ", n, " bytes, over the format's 100 MB limit");
  RG_CHECK(is_utf8(bytes.substr(8, n)), kOp, origin, ": the header is not valid UTF-8");
  HeaderReader header(bytes.substr(8, n), origin);
  header.read();
  const std::string_view data = bytes.substr(8 + n);

  // Every byte of the data belongs to exactly one tensor, in some order: sorted by offset, each
  // tensor starts where the previous one ended, and the last ends at the file's end.
  std::vector<size_t> order(header.entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Entry &x = header.entries[a], &y = header.entries[b];
    return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
  });
  uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (size_t i : order) {
    const Entry& e = header.entries[i];
    RG_CHECK(e.begin <= e.end, kOp, origin, ": '", e.name, "' has data_offsets [", e.begin, ", ", e.end,
             "]: the end is before the beginning");
    const uint64_t needed = bytes_needed(e, origin);
    RG_CHECK(e.end - e.begin == needed, kOp, origin, ": '", e.name, "' spans ", e.end - e.begin, " bytes, but ",
             shape_str(e.shape), " ", format_name(e.dtype), " needs ", needed);
    RG_CHECK(e.begin >= expected, kOp, origin, ": the data of '", e.name, "' [", e.begin, ", ", e.end,
             ") overlaps that of '", previous ? previous->name : "", "' (which ends at ", expected, ")");
    RG_CHECK(e.begin == expected, kOp, origin, ": bytes [", expected, ", ", e.begin,
             ") of the data belong to no tensor", previous ? " (after '" + previous->name + "')" : std::string());
    expected = e.end;
    previous = &e;
  }
  RG_CHECK(expected == data.size(), kOp, origin, ": the tensors' data ends at byte ", expected, " but the file holds ",
           data.size(), " bytes of data", expected < data.size() ? ": trailing bytes belong to no tensor" : "");

  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  for (size_t i : order) {
    const Entry& e = header.entries[i];
    // An empty tensor has no bytes to copy (and data.data() may be null).
    file.tensors.emplace_back(e.name, e.begin == e.end
                                          ? zeros(e.shape, {.dtype = e.dtype})
                                          : from_blob(data.data() + e.begin, e.shape, e.dtype, {.dtype = e.dtype}));
  }
  return file;
}

void save_safetensors(const std::string& path, const StateDict& entries, const SafetensorsMetadata& metadata) {
  write_file_atomically(path, serialize_safetensors(entries, metadata), "save_safetensors");
}

SafetensorsFile read_safetensors(const std::string& path) {
  return parse_safetensors(read_whole_file(path, kOp), path);
}

StateDict load_safetensors(const std::string& path) { return read_safetensors(path).tensors; }

}  // namespace ringgrad::nn
