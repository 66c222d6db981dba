// Character-level text data: vocabulary, the fortunes corpus as WORKLOADS.md pins it, splits,
// window sampling (range, determinism, per-rank and per-epoch streams) and batches.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>

#include "ringgrad.h"

using namespace ringgrad;
using namespace ringgrad::data;

TEST_CASE("CharVocab: sorted distinct bytes, round trip, stored as a u8 tensor") {
  CharVocab vocab("hello, world");
  CHECK(vocab.chars() == " ,dehlorw");
  const std::vector<int64_t> ids = vocab.encode("low");
  CHECK(ids == std::vector<int64_t>{5, 6, 8});
  CHECK(vocab.decode(ids) == "low");
  CharVocab back = CharVocab::from_tensor(vocab.to_tensor());
  CHECK(back.chars() == vocab.chars());
  CHECK_THROWS_WITH_AS(vocab.encode("lox"), doctest::Contains("byte 120 at position 2 is not in the vocabulary"),
                       Error);
}

TEST_CASE("the fortunes corpus is the one ../shared/WORKLOADS.md describes") {
  if (!std::filesystem::is_directory("/usr/share/games/fortunes")) {
    MESSAGE("fortunes not installed (scripts/setup.sh installs it): skipped");
    return;
  }
  TextCorpus corpus = load_fortunes();
  CHECK(corpus.text.size() == 2576674);
  CHECK(CharVocab(corpus.text).size() == 114);
  for (const auto& f : corpus.files) CHECK(f.find(".dat") == std::string::npos);
  CHECK(std::is_sorted(corpus.files.begin(), corpus.files.end()));
}

TEST_CASE("WindowSampler: offsets in range, reproducible, distinct per rank and per epoch") {
  const int64_t n = 1000, T = 16;
  WindowSampler r0(n, T, {.num_replicas = 2, .rank = 0, .seed = 3}),
      r1(n, T, {.num_replicas = 2, .rank = 1, .seed = 3});
  const auto a = r0.offsets(5, 8), again = r0.offsets(5, 8), b = r1.offsets(5, 8);
  CHECK(a == again);
  CHECK(a != b);
  for (int64_t o : a) {
    CHECK(o >= 0);
    CHECK(o + T < n);  // room for T + 1 tokens
  }
  r0.set_epoch(1);
  CHECK(r0.offsets(5, 8) != a);
  // Roughly uniform: over many draws every tenth of the range is hit.
  std::set<int64_t> tenths;
  for (int64_t o : r1.offsets(0, 500)) tenths.insert(o * 10 / (n - T));
  CHECK(tenths.size() == 10);
  CHECK_THROWS_WITH_AS(WindowSampler(16, 16), doctest::Contains("shorter than one window (block_size + 1 = 17)"),
                       Error);
}

TEST_CASE("window_batch: y is x shifted by one token") {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 50; ++i) tokens.push_back(i % 7);
  auto [x, y] = window_batch(tokens, {0, 10, 40}, 9);
  CHECK(x.shape() == Shape{3, 9});
  const auto xv = x.to_vector(), yv = y.to_vector();
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 9; ++t) {
      const int64_t o = std::vector<int64_t>{0, 10, 40}[b];
      CHECK(xv[b * 9 + t] == static_cast<double>(tokens[o + t]));
      CHECK(yv[b * 9 + t] == static_cast<double>(tokens[o + t + 1]));
    }
  auto [train, val] = split_tokens(tokens, 0.9);
  CHECK(train.size() == 45);
  CHECK(val.size() == 5);
}
