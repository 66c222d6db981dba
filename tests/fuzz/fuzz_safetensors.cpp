// Fuzz target: nn::parse_safetensors (nn/safetensors.h), then every tensor it returns read in full.
// Input: a mode byte, then the file --
//   even: as it is;
//   odd:  a header and data whose 8-byte length prefix the target writes itself: the header is
//         everything up to the last '}', so that a mutation inside the JSON keeps the prefix true and
//         the parser's own checks are what meet it.
#include <cstring>
#include <string>

#include "nn/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ringgrad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2) {
    const size_t close = bytes.rfind('}');
    const uint64_t n = close == std::string::npos ? 0 : close + 1;
    std::string prefix(8, '\0');
    std::memcpy(prefix.data(), &n, 8);  // little-endian, as the format
    bytes = prefix + bytes;
  }
  const std::string path = fuzz::write_file("input.safetensors", bytes.data(), bytes.size());
  fuzz::expect_success_or_clear_error(path, [&] {
    const nn::SafetensorsFile file = nn::read_safetensors(path);
    // Every tensor read in full: ASan sees any whose storage is shorter than its shape.
    for (const auto& [name, t] : file.tensors)
      if (t.numel() > 0) (void)t.to(DType::f64).sum().item();
  });
  return 0;
}
