// Character-level text data for language models (examples/gpt_mini).
//
//   data::TextCorpus corpus = data::load_fortunes();          // or load_text_file(path)
//   data::CharVocab vocab(corpus.text);                       // distinct bytes, sorted
//   std::vector<int64_t> ids = vocab.encode(corpus.text);
//   auto [train, val] = data::split_tokens(ids, 0.9);         // first 90% / last 10%
//   data::WindowSampler sampler(train.size(), block_size, {.seed = 1, .num_replicas = N, .rank = r});
//   sampler.set_epoch(e);
//   auto [x, y] = data::window_batch(train, sampler.offsets(step, batch), block_size);  // (B, T) i64 each
//
// "Characters" are bytes: the vocabulary is every byte value the corpus contains (UTF-8 text stays
// intact byte by byte, and generation decodes to the same bytes). It is stored with a checkpoint as a
// u8 tensor (to_tensor / from_tensor), so a checkpoint alone can generate text.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::data {

struct TextCorpus {
  std::string text;
  std::vector<std::string> files;  // what it was read from, in order
};

// Every regular file of `dir` except *.dat (the fortune index files), in file-name order, '%'
// separator lines kept (../shared/WORKLOADS.md W3: 2,576,674 bytes for Debian's `fortunes`).
TextCorpus load_fortunes(const std::string& dir = "/usr/share/games/fortunes");
TextCorpus load_text_file(const std::string& path);

class CharVocab {
 public:
  explicit CharVocab(const std::string& text);  // the distinct bytes of text, sorted
  static CharVocab from_tensor(const Tensor& bytes);
  Tensor to_tensor() const;  // (V,) u8

  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  std::vector<int64_t> encode(const std::string& text) const;  // throws on a byte not in the vocabulary
  std::string decode(const std::vector<int64_t>& ids) const;
  const std::string& chars() const { return chars_; }

 private:
  CharVocab() = default;
  std::string chars_;  // id -> byte
  int16_t id_[256];    // byte -> id, -1 when absent
};

// The first `fraction` of the tokens, and the rest.
std::pair<std::vector<int64_t>, std::vector<int64_t>> split_tokens(const std::vector<int64_t>& ids, double fraction);

// Fields in SamplerOptions' order (num_replicas, rank, ..., seed), so designated initialisers read
// the same for both samplers.
struct WindowSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  uint64_t seed = 0;
};

// Random windows of block_size + 1 tokens: offsets uniform in [0, num_tokens - block_size - 1].
// Offsets depend only on (seed, epoch, step, rank, batch slot) -- Philox counters, so every rank
// draws its own disjoint stream, the same on every run, and a resumed run continues the same stream.
class WindowSampler {
 public:
  WindowSampler(int64_t num_tokens, int64_t block_size, WindowSamplerOptions options = {});
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> offsets(int64_t step, int64_t batch_size) const;

 private:
  int64_t num_tokens_, block_size_;
  WindowSamplerOptions options_;
  int64_t epoch_ = 0;
};

// x[b] = tokens[o_b .. o_b + T), y[b] = tokens[o_b + 1 .. o_b + T]: (B, T) i64 each.
std::pair<Tensor, Tensor> window_batch(const std::vector<int64_t>& tokens, const std::vector<int64_t>& offsets,
                                       int64_t block_size);

}  // namespace ringgrad::data
