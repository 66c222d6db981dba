// Fuzz target: optim::TrainingCheckpoint::load and optim::checkpoint_metadata (the file read by
// `gpt_mini --generate`), into the training state of tests/fuzz/training_setup.h. Input: a mode
// byte, then the file (fuzz::checkpoint_bytes: odd modes get a valid checksum).
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/training_setup.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  const std::string bytes = fuzz::checkpoint_bytes(data, size);
  const std::string path = fuzz::write_file("input.train.ckpt", bytes.data(), bytes.size());
  fuzz::expect_success_or_clear_error(path, [&] { (void)optim::checkpoint_metadata(path); });
  fuzz::expect_success_or_clear_error(path, [&] {
    fuzz::TrainingSetup setup;
    (void)setup.checkpoint.load(path, {.strict = false});
    setup.train_one_step();  // what was loaded must also be usable
  });
  return 0;
}
