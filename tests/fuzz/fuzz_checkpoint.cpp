// Fuzz target: nn::load_checkpoint (nn/checkpoint.h), then loading what it returns into a module.
// Input: a mode byte, then the file (fuzz::checkpoint_bytes: odd modes get a valid checksum).
#include "nn/checkpoint.h"
#include "nn/linear.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  const std::string bytes = fuzz::checkpoint_bytes(data, size);
  const std::string path = fuzz::write_file("input.ckpt", bytes.data(), bytes.size());
  fuzz::expect_success_or_clear_error(path, [&] {
    const StateDict state = nn::load_checkpoint(path);
    // Every tensor read in full: ASan sees any whose storage is shorter than its shape.
    for (const auto& [name, t] : state)
      if (t.numel() > 0) (void)t.to(DType::f64).sum().item();
    nn::Linear model(3, 2);
    try {
      model.load_state_dict(state, /*strict=*/false);
    } catch (const Error&) {
      // A well-formed file need not fit this module: that error is about the module, not the file.
    }
  });
  return 0;
}
