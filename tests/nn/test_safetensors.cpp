// safetensors files (nn/safetensors.h): exact bytes against a hand-built file, bit-exact round
// trips, files laid out as other writers lay them out, and every malformation the specification
// rules out refused with a message naming it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "ringgrad.h"

using namespace ringgrad;
namespace fs = std::filesystem;

namespace {

// A file from its header text and data bytes, the length prefix little-endian.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

std::string refusal(const std::string& bytes) {
  try {
    nn::parse_safetensors(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("safetensors: the bytes of a small file are exactly the format's") {
  const StateDict state{{"w", from_vector(std::vector<double>{1.5, -2.0}, {2})},
                        {"s", full({}, 7.0, {.dtype = DType::i64})}};
  const std::string file = nn::serialize_safetensors(state);
  // Written by hand from the specification: the JSON header padded with spaces to a multiple of 8,
  // then w's 8 bytes at [0, 8) and s's 8 at [8, 16).
  std::string header = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("s":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const int64_t seven = 7;
  CHECK(file == raw_file(header, f32_bytes({1.5f, -2.0f}) + std::string(reinterpret_cast<const char*>(&seven), 8)));
  CHECK((file.size() - 8 - 16) % 8 == 0);
}

TEST_CASE("safetensors: every dtype round-trips bit for bit, empty and 0-dim tensors and odd names included") {
  Generator g(3);
  Tensor f32 = randn({3, 5}, g);
  float* p = static_cast<float*>(f32.raw_data());
  p[0] = std::numeric_limits<float>::quiet_NaN();
  p[1] = -std::numeric_limits<float>::infinity();
  p[2] = -0.0f;
  p[3] = std::numeric_limits<float>::denorm_min();
  const StateDict state{
      {"layer.0.weight", f32},
      {"half", randn({4, 2}, g).to(DType::f16)},
      {"brain", randn({7}, g).to(DType::bf16)},
      {"double", randn({2, 2, 2}, g).to(DType::f64)},
      {"steps", from_vector(std::vector<int64_t>{-3, 0, int64_t{1} << 40}, {3})},
      {"i32", from_vector(std::vector<int64_t>{-7, 9}, {2}, {.dtype = DType::i32})},
      {"bytes", from_vector(std::vector<int64_t>{0, 255, 17}, {3}, {.dtype = DType::u8})},
      {"scalar", full({}, 0.25)},
      {"empty", zeros({0, 3})},
      {"quote\"back\\slash\nnewline \xc3\xa9", ones({1})},
  };
  const fs::path path = fs::temp_directory_path() / ("ringgrad_st_" + std::to_string(::getpid()) + ".safetensors");
  nn::save_safetensors(path.string(), state, {{"step", "12"}});
  const nn::SafetensorsFile back = nn::read_safetensors(path.string());
  fs::remove(path);
  REQUIRE(back.tensors.size() == state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    CAPTURE(state[i].first);
    CHECK(back.tensors[i].first == state[i].first);  // written in order, read in data order
    CHECK(back.tensors[i].second.dtype() == state[i].second.dtype());
    CHECK(back.tensors[i].second.shape() == state[i].second.shape());
    CHECK(bytes_of(back.tensors[i].second) == bytes_of(state[i].second));
  }
  CHECK(back.metadata == nn::SafetensorsMetadata{{"format", "pt"}, {"step", "12"}});
}

TEST_CASE("safetensors: a file laid out as another writer would is read") {
  // Entries in another order than their data, fields in another order, spaces, \u escapes,
  // metadata last, two empty tensors sharing an offset.
  const std::string header = R"({ "b" : {"data_offsets": [8, 12], "shape": [1], "dtype": "F32"},)"
                             R"( "a\u00e9\ud83d\ude00": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]},)"
                             R"( "e1": {"dtype": "BF16", "shape": [0], "data_offsets": [12, 12]},)"
                             R"( "e2": {"dtype": "F16", "shape": [3, 0], "data_offsets": [12, 12]},)"
                             R"( "__metadata__": {"source": "hand"} }    )";
  const nn::SafetensorsFile f = nn::parse_safetensors(raw_file(header, f32_bytes({1, 2, 3})), "hand");
  REQUIRE(f.tensors.size() == 4);
  CHECK(f.tensors[0].first == "a\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(f.tensors[0].second.to_vector() == std::vector<double>{1, 2});
  CHECK(f.tensors[0].second.shape() == Shape{2, 1});
  CHECK(f.tensors[1].first == "b");
  CHECK(f.tensors[1].second.to_vector() == std::vector<double>{3});
  CHECK(f.tensors[3].second.shape() == Shape{3, 0});
  CHECK(f.metadata == nn::SafetensorsMetadata{{"source", "hand"}});
}

TEST_CASE("safetensors: malformed files are refused, each with its reason") {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data = f32_bytes({1, 2});
  REQUIRE(refusal(raw_file(ok, data)) == "(accepted)");

  struct Case {
    const char* what;
    std::string bytes;
    const char* message;
  };
  std::string beyond = raw_file(ok, data);
  const uint64_t too_long = ok.size() + data.size() + 1;
  std::memcpy(beyond.data(), &too_long, 8);
  std::string huge(8, '\0');
  const uint64_t over_limit = 100'000'001;
  std::memcpy(huge.data(), &over_limit, 8);
  huge += std::string(100'000'001, ' ');
  const Case cases[] = {
      {"shorter than the length", "abc", "shorter than the 8-byte header length"},
      {"header beyond the file", beyond, "the header claims"},
      {"header over the limit", huge, "100 MB limit"},
      {"not an object", raw_file("[1]", ""), "does not start with '{'"},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "xx"),
       "has dtype \"F8_E4M3\""},
      {"shape x dtype != bytes", raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
       "spans 8 bytes, but (3,) F32 needs 12"},
      {"duplicate names",
       raw_file(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           data),
       "the name 'a' appears twice"},
      {"overlap",
       raw_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           data),
       "overlaps"},
      {"hole", raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data), "belong to no tensor"},
      {"trailing data", raw_file(ok, data + "z"), "trailing bytes belong to no tensor"},
      {"data stops short", raw_file(ok, data.substr(0, 7)), "holds 7 bytes of data"},
      {"missing field", raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", data), "needs dtype, shape and data_offsets"},
      {"unknown field", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data),
       "\"x\" (unknown)"},
      {"field twice", raw_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
       "\"dtype\" twice"},
      {"negative dimension", raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
       "is negative"},
      {"fractional offset", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", data),
       "is not an integer"},
      {"end before begin", raw_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data),
       "the end is before the beginning"},
      {"one offset", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", data),
       "needs data_offsets [BEGIN, END]"},
      {"garbage after the object", raw_file(ok + " x", data), "unexpected characters after"},
      {"metadata not strings", raw_file(R"({"__metadata__":{"n":1}})", ""), "is not a string"},
      {"overflowing shape",
       raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data),
       "overflows 64 bits"},
      {"lone surrogate", raw_file(R"({"\udc00":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
       "lone low surrogate"},
      {"not UTF-8", raw_file("{\"\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data),
       "not valid UTF-8"},
      {"raw control character", raw_file("{\"a\nb\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data),
       "control character"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    const std::string message = refusal(c.bytes);
    CHECK_MESSAGE(message.find(c.message) != std::string::npos, message);
    CHECK_MESSAGE(message.find("load_safetensors") != std::string::npos, message);
  }
}

TEST_CASE("safetensors: a GPT saved and loaded into a fresh one computes the same logits") {
  const nn::GPTConfig config{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  Generator g1(1), g2(2);
  nn::GPT trained(config, &g1), fresh(config, &g2);
  const Tensor tokens = from_vector(std::vector<int64_t>{1, 4, 2, 8, 5, 7}, {1, 6});
  const fs::path path = fs::temp_directory_path() / ("ringgrad_gpt_" + std::to_string(::getpid()) + ".safetensors");
  nn::save_safetensors(path.string(), trained.state_dict());
  CHECK(fresh.load_state_dict(nn::load_safetensors(path.string())).all_matched());
  fs::remove(path);
  NoGradGuard no_grad;
  CHECK(bytes_of(fresh.forward(tokens)) == bytes_of(trained.forward(tokens)));
}

TEST_CASE("safetensors: saving refuses names the format cannot hold, and a failed save leaves nothing") {
  CHECK_THROWS_WITH_AS(nn::serialize_safetensors({{"a", ones({1})}, {"a", ones({1})}}),
                       doctest::Contains("the name 'a' twice"), Error);
  CHECK_THROWS_WITH_AS(nn::serialize_safetensors({{"__metadata__", ones({1})}}), doctest::Contains("format's own"),
                       Error);
  CHECK_THROWS_WITH_AS(nn::serialize_safetensors({}, {{"step", "1"}, {"step", "2"}}),
                       doctest::Contains("the metadata key 'step' twice"), Error);
  // The header is UTF-8 JSON: a Latin-1 byte, a lone continuation byte, an overlong '/' and a UTF-16
  // surrogate written as UTF-8 are refused; a 4-byte character is fine.
  for (const char* bad : {"caf\xe9", "\x80", "\xc0\xaf", "\xed\xa0\x80"})
    CHECK_THROWS_WITH_AS(nn::serialize_safetensors({}, {{"note", bad}}), doctest::Contains("not valid UTF-8"), Error);
  CHECK_NOTHROW(nn::serialize_safetensors({{"\xf0\x9f\x98\x80", ones({1})}}));
  const fs::path missing = fs::temp_directory_path() / "ringgrad_no_such_dir" / "m.safetensors";
  CHECK_THROWS_WITH_AS(nn::save_safetensors(missing.string(), {{"a", ones({1})}}), doctest::Contains("cannot create"),
                       Error);
  CHECK_FALSE(fs::exists(missing.string() + ".tmp"));
}
