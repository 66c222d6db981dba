// Writes the binary seeds of tests/fuzz/corpus (the text and command-line seeds are written by
// hand): small valid IDX files and checkpoints, from which libFuzzer's mutations start.
//
//   build/tests/fuzz/fuzz_make_seeds tests/fuzz/corpus
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/ops.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "tests/fuzz/training_setup.h"
#include "tests/fuzz/zero_save.h"

using namespace ringgrad;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::printf("%s (%zu bytes)\n", path.string().c_str(), bytes.size());
}

// An IDX file of unsigned bytes: 0, 0, 0x08, ndim, big-endian u32 dims, the elements.
std::vector<uint8_t> idx(const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(i * 37));
  return out;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& in) {
  z_stream z{};
  deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&z, in.size()) + 32);
  z.next_in = const_cast<uint8_t*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::vector<uint8_t> with_mode(uint8_t mode, std::vector<uint8_t> bytes) {
  bytes.insert(bytes.begin(), mode);
  return bytes;
}

std::vector<uint8_t> read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path corpus = argv[1];
  // fuzz_idx: mode byte 0 = the bytes as they are, 1 = gzip-compressed by the target.
  write(corpus / "idx" / "images-2x3x4", with_mode(0, idx({2, 3, 4})));
  write(corpus / "idx" / "labels-5", with_mode(0, idx({5})));
  write(corpus / "idx" / "images-2x3x4-via-gzip", with_mode(1, idx({2, 3, 4})));
  write(corpus / "idx" / "images-2x3x4.gz", with_mode(0, gzip(idx({2, 3, 4}))));

  const fs::path scratch = fs::temp_directory_path() / "ringgrad_make_seeds.ckpt";
  StateDict state{{"weight", arange(0, 6, 1).reshape({2, 3})},
                  {"half", full({2}, 1.5, {.dtype = DType::f16})},
                  {"count", scalar_tensor(7, {.dtype = DType::i64})},
                  {"empty", zeros({0, 4})}};
  nn::save_checkpoint(scratch.string(), state);
  // fuzz_safetensors: mode byte 0 = the file as it is, 1 = without its length prefix (the target
  // writes it).
  const std::string st = nn::serialize_safetensors(state, {{"step", "3"}});
  write(corpus / "safetensors" / "four-tensors.safetensors", with_mode(0, {st.begin(), st.end()}));
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, st.data(), 8);
  const std::string header = st.substr(8, header_bytes), tensors = st.substr(8 + header_bytes);
  const std::string unpadded = header.substr(0, header.rfind('}') + 1) + tensors;  // the target's own prefix
  write(corpus / "safetensors" / "four-tensors-prefix-by-target", with_mode(1, {unpadded.begin(), unpadded.end()}));
  // The checkpoint targets' mode byte (fuzz::checkpoint_bytes): 0 as it is, 1 checksum recomputed.
  write(corpus / "checkpoint" / "four-tensors.ckpt", with_mode(0, read(scratch)));
  write(corpus / "checkpoint" / "four-tensors-crc-fixed.ckpt", with_mode(1, read(scratch)));

  fuzz::TrainingSetup setup;
  setup.train_one_step();
  setup.checkpoint.save(scratch.string());
  write(corpus / "training_checkpoint" / "linear-sgd-loader.ckpt", with_mode(0, read(scratch)));
  write(corpus / "training_checkpoint" / "linear-sgd-loader-crc-fixed.ckpt", with_mode(1, read(scratch)));
  fs::remove(scratch);

  // fuzz_zero_checkpoint: mode bit 1 picks the file (0: the index, 2: rank 0's shard), bit 0 the
  // checksum fix.
  const fs::path zero = fs::temp_directory_path() / "ringgrad_make_seeds.zero";
  fuzz::write_valid_zero_save(zero);
  write(corpus / "zero_checkpoint" / "index.ckpt", with_mode(0, read(zero / fuzz::kZeroIndex)));
  write(corpus / "zero_checkpoint" / "index-crc-fixed.ckpt", with_mode(1, read(zero / fuzz::kZeroIndex)));
  write(corpus / "zero_checkpoint" / "shard0.ckpt", with_mode(2, read(zero / fuzz::kZeroShard0)));
  write(corpus / "zero_checkpoint" / "shard0-crc-fixed.ckpt", with_mode(3, read(zero / fuzz::kZeroShard0)));
  fs::remove_all(zero);
  return 0;
}
