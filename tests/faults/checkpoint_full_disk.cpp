// checkpoint_full_disk DIR: DIR is a small file system (tests/faults/full_disk_test.sh mounts a 256 KiB
// tmpfs there). Saves a checkpoint that fits, then one that cannot, and checks that the second save
// fails with an error naming the file and the cause, that the first checkpoint is intact (it still
// loads, with its values), and that no temporary file is left. Exit 0 when all of that holds.
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/ops.h"
#include "nn/checkpoint.h"

using namespace ringgrad;

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "checkpoint_full_disk: FAILED: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage: checkpoint_full_disk DIR");
  const std::string path = std::string(argv[1]) + "/ck.bin";
  nn::save_checkpoint(path, {{"w", full({16, 16}, 3.0)}});  // 1 KiB: fits
  std::string error;
  try {
    nn::save_checkpoint(path, {{"w", full({1024, 1024}, 5.0)}});  // 4 MiB: cannot
  } catch (const Error& e) {
    error = e.what();
  }
  std::printf("second save: %s\n", error.empty() ? "(no error)" : error.c_str());
  if (error.empty()) return fail("saving 4 MiB into a 256 KiB file system did not fail");
  if (error.find(path + ".tmp") == std::string::npos || error.find("No space left on device") == std::string::npos)
    return fail("the error does not name the temporary file and the cause");
  if (std::filesystem::exists(path + ".tmp")) return fail(path + ".tmp was left behind");
  const StateDict back = nn::load_checkpoint(path);
  if (back.size() != 1 || !equal(back[0].second, full({16, 16}, 3.0))) return fail("the previous checkpoint changed");
  std::printf("the previous checkpoint is intact; no temporary file left\n");
  return 0;
}
