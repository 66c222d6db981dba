#include "data/text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/ops.h"
#include "core/random.h"

namespace ringgrad::data {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RG_CHECK(in.good(), "load_text", "cannot open ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TextCorpus load_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  RG_CHECK(fs::is_directory(dir), "load_fortunes", dir,
           " is not a directory (apt-get install fortunes, or pass --data FILE)");
  TextCorpus corpus;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() != ".dat")
      corpus.files.push_back(entry.path().string());
  std::sort(corpus.files.begin(), corpus.files.end());
  for (const auto& f : corpus.files) corpus.text += read_file(f);
  RG_CHECK(!corpus.text.empty(), "load_fortunes", "no text in ", dir);
  return corpus;
}

TextCorpus load_text_file(const std::string& path) {
  TextCorpus corpus{read_file(path), {path}};
  RG_CHECK(!corpus.text.empty(), "load_text_file", path, " is empty");
  return corpus;
}

CharVocab::CharVocab(const std::string& text) {
  bool present[256] = {};
  for (unsigned char ch : text) present[ch] = true;
  std::fill(std::begin(id_), std::end(id_), int16_t{-1});
  for (int b = 0; b < 256; ++b)
    if (present[b]) {
      id_[b] = static_cast<int16_t>(chars_.size());
      chars_.push_back(static_cast<char>(b));
    }
  RG_CHECK(!chars_.empty(), "CharVocab", "the text is empty");
}

CharVocab CharVocab::from_tensor(const Tensor& bytes) {
  RG_CHECK(bytes.defined() && bytes.dtype() == DType::u8 && bytes.dim() == 1, "CharVocab",
           "expects a (V,) u8 tensor, got ", bytes.defined() ? bytes.desc() : std::string("undefined"));
  std::string chars;
  for (double v : bytes.to_vector()) chars.push_back(static_cast<char>(static_cast<unsigned char>(v)));
  CharVocab vocab(chars);
  RG_CHECK(vocab.chars_ == chars, "CharVocab", "the stored vocabulary is not sorted distinct bytes");
  return vocab;
}

Tensor CharVocab::to_tensor() const {
  std::vector<double> v;
  for (unsigned char ch : chars_) v.push_back(ch);
  return from_vector(v, {size()}, {.dtype = DType::u8});
}

std::vector<int64_t> CharVocab::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t id = id_[static_cast<unsigned char>(text[i])];
    RG_CHECK(id >= 0, "CharVocab::encode", "byte ", static_cast<int>(static_cast<unsigned char>(text[i])),
             " at position ", i, " is not in the vocabulary of ", size(), " characters");
    ids.push_back(id);
  }
  return ids;
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t id : ids) {
    RG_CHECK(id >= 0 && id < size(), "CharVocab::decode", "id ", id, " is not in [0, ", size(), ")");
    s.push_back(chars_[static_cast<size_t>(id)]);
  }
  return s;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> split_tokens(const std::vector<int64_t>& ids, double fraction) {
  RG_CHECK(fraction > 0 && fraction <= 1, "split_tokens", "fraction must be in (0, 1], got ", fraction);
  const size_t cut = static_cast<size_t>(static_cast<double>(ids.size()) * fraction);
  return {std::vector<int64_t>(ids.begin(), ids.begin() + cut), std::vector<int64_t>(ids.begin() + cut, ids.end())};
}

WindowSampler::WindowSampler(int64_t num_tokens, int64_t block_size, WindowSamplerOptions options)
    : num_tokens_(num_tokens), block_size_(block_size), options_(options) {
  RG_CHECK(block_size > 0, "WindowSampler", "block_size must be positive, got ", block_size);
  RG_CHECK(num_tokens >= block_size + 1, "WindowSampler", "a text of ", num_tokens,
           " tokens is shorter than one window (block_size + 1 = ", block_size + 1,
           "); use a longer text or a smaller --block-size");
  RG_CHECK(options.num_replicas > 0 && options.rank >= 0 && options.rank < options.num_replicas, "WindowSampler",
           "rank ", options.rank, " is not in [0, ", options.num_replicas, ")");
}

std::vector<int64_t> WindowSampler::offsets(int64_t step, int64_t batch_size) const {
  const uint64_t range = static_cast<uint64_t>(num_tokens_ - block_size_);  // offsets 0 .. range - 1
  // One Philox key per (seed, epoch); counters enumerate (step, rank, slot): disjoint streams.
  const uint64_t key = options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch_);
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch_size; ++b) {
    const uint64_t counter = (static_cast<uint64_t>(step) * static_cast<uint64_t>(options_.num_replicas) +
                              static_cast<uint64_t>(options_.rank)) *
                                 static_cast<uint64_t>(batch_size) +
                             static_cast<uint64_t>(b);
    const Philox4x32 block = philox4x32(counter, 0, key);
    const uint64_t word = (static_cast<uint64_t>(block.v[0]) << 32) | block.v[1];
    out.push_back(static_cast<int64_t>(word % range));  // bias < range / 2^64: negligible
  }
  return out;
}

std::pair<Tensor, Tensor> window_batch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& offsets,
                                       int64_t block_size) {
  const int64_t B = static_cast<int64_t>(offsets.size());
  std::vector<int64_t> x, y;
  x.reserve(static_cast<size_t>(B * block_size));
  y.reserve(static_cast<size_t>(B * block_size));
  for (int64_t o : offsets) {
    RG_CHECK(o >= 0 && o + block_size < static_cast<int64_t>(tokens.size()), "window_batch", "window at ", o, " of ",
             block_size + 1, " tokens does not fit in ", tokens.size(), " tokens");
    x.insert(x.end(), tokens.begin() + o, tokens.begin() + o + block_size);
    y.insert(y.end(), tokens.begin() + o + 1, tokens.begin() + o + block_size + 1);
  }
  return {from_vector(x, {B, block_size}, {.dtype = DType::i64}),
          from_vector(y, {B, block_size}, {.dtype = DType::i64})};
}

}  // namespace ringgrad::data
