// Fuzz target: data::read_idx, plain and gzip-compressed (data/idx.h).
//
// The first byte picks how the rest reaches the reader:
//   0  the bytes as a file (a plain IDX file, or a gzip stream the fuzzer mutated)
//   1  the bytes gzip-compressed here first, so that mutations of the IDX content also travel the
//      gzip path
#include <zlib.h>

#include <vector>

#include "data/idx.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ringgrad;

namespace {

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> out(deflateBound(&z, size) + 32);
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  const bool compress = data[0] % 2 == 1;
  std::string path;
  if (compress) {
    const std::vector<uint8_t> z = gzip(data + 1, size - 1);
    path = fuzz::write_file("input-idx.gz", z.data(), z.size());
  } else {
    path = fuzz::write_file("input-idx", data + 1, size - 1);
  }
  fuzz::expect_success_or_clear_error(path, [&] {
    Tensor t = data::read_idx(path);
    // Reading every element lets ASan see a tensor whose storage is shorter than its shape.
    if (t.numel() > 0) (void)t.to(DType::f64).sum().item();
  });
  return 0;
}
