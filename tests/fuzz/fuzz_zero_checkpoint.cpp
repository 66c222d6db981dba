// Fuzz target: dist::consolidate_sharded (dist/zero/zero_checkpoint.cpp) over a valid two-rank
// sharded optimizer checkpoint in which one file is the input: the latest index, or rank 0's shard.
// Input: a mode byte -- bit 0: fuzz::checkpoint_bytes' checksum fix; bit 1: the shard, else the
// index -- then the file.
#include <filesystem>

#include "dist/zero/zero_optimizer.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/zero_save.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  const std::filesystem::path dir = fuzz::scratch_dir() / "zero";
  std::filesystem::remove_all(dir);
  fuzz::write_valid_zero_save(dir);
  const bool shard = size > 0 && (data[0] & 2) != 0;
  const std::string bytes = fuzz::checkpoint_bytes(data, size);
  fuzz::write_file(std::string("zero/") + (shard ? fuzz::kZeroShard0 : fuzz::kZeroIndex), bytes.data(), bytes.size());
  fuzz::expect_success_or_clear_error(dir.string(), [&] {
    const StateDict state = dist::consolidate_sharded(dir.string());
    for (const auto& [name, t] : state)  // every tensor read in full
      if (t.numel() > 0) (void)t.to(DType::f64).sum().item();
  });
  return 0;
}
