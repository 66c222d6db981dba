// Fuzz target: optim::TrainingCheckpoint::load and optim::checkpoint_metadata (the file read by
// `gpt_mini --generate`), into the training state of tests/fuzz/training_setup.h.
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/training_setup.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 20)) return 0;
  const std::string path = fuzz::write_file("input.train.ckpt", data, size);
  fuzz::expect_success_or_clear_error(path, [&] { (void)optim::checkpoint_metadata(path); });
  fuzz::expect_success_or_clear_error(path, [&] {
    fuzz::TrainingSetup setup;
    (void)setup.checkpoint.load(path, {.strict = false});
    setup.train_one_step();  // what was loaded must also be usable
  });
  return 0;
}
