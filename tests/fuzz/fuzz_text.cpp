// Fuzz target: the text corpus loader of examples/gpt_mini (data/text.h): a file and a fortune
// folder read, the vocabulary built and stored, the tokens split and cut into windows.
#include <filesystem>

#include "data/text.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  const std::string path = fuzz::write_file("input.txt", data, size);
  fuzz::expect_success_or_clear_error(path, [&] {
    const data::TextCorpus corpus = data::load_text_file(path);
    const data::CharVocab vocab(corpus.text);
    const data::CharVocab stored = data::CharVocab::from_tensor(vocab.to_tensor());
    const std::vector<int64_t> ids = stored.encode(corpus.text);
    if (stored.decode(ids) != corpus.text) fuzz::finding("decode(encode(text)) != text");
    const auto [train, val] = data::split_tokens(ids, 0.9);
    const int64_t block = 4;
    if (static_cast<int64_t>(train.size()) > block) {
      data::WindowSampler sampler(static_cast<int64_t>(train.size()), block, {.seed = 1});
      (void)data::window_batch(train, sampler.offsets(0, 3), block);
    }
  });
  // The same bytes as the one fortune file of a folder, beside an index file the loader skips.
  const auto dir = fuzz::scratch_dir() / "fortunes";
  std::filesystem::create_directories(dir);
  fuzz::write_file("fortunes/input", data, size);
  fuzz::write_file("fortunes/input.dat", data, size);
  fuzz::expect_success_or_clear_error(dir.string(), [&] { (void)data::load_fortunes(dir.string()); });
  return 0;
}
