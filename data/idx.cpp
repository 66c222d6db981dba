#include "data/idx.h"

#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <tuple>
#include <vector>

#include "core/ops.h"

namespace ringgrad::data {
namespace {

struct GzFile {
  explicit GzFile(const std::string& path) : handle(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (handle) gzclose(handle);
  }
  gzFile handle;
};

// Reads exactly n bytes; returns how many it got.
size_t read_bytes(GzFile& f, void* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f.handle, static_cast<char*>(out) + got, chunk);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  RG_CHECK(std::filesystem::exists(path), "read_idx", "file not found: ", path);
  GzFile f(path);
  RG_CHECK(f.handle != nullptr, "read_idx", "cannot open ", path);
  unsigned char magic[4];
  RG_CHECK(read_bytes(f, magic, 4) == 4, "read_idx", path, ": file too short for the 4-byte IDX header");
  RG_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx", path, ": bad magic number (first two bytes must be 0, got ",
           int(magic[0]), " ", int(magic[1]), "): not an IDX file");
  RG_CHECK(magic[2] == 0x08, "read_idx", path, ": element type 0x", std::hex, int(magic[2]),
           " is not supported (only 0x08, unsigned byte)");
  const int ndim = magic[3];
  RG_CHECK(ndim >= 1 && ndim <= 4, "read_idx", path, ": ", ndim, " dimensions (expected 1 to 4)");
  Shape shape(ndim);
  for (int d = 0; d < ndim; ++d) {
    unsigned char b[4];
    RG_CHECK(read_bytes(f, b, 4) == 4, "read_idx", path, ": header truncated in the size of dimension ", d);
    shape[d] = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
    RG_CHECK(shape[d] > 0, "read_idx", path, ": dimension ", d, " has size 0");
  }
  // Note [Check before trusting]: the header's sizes are compared with the file before anything is
  // allocated, so a 20-byte file cannot ask for 2^64 bytes. Four dimensions of up to 2^32 - 1 may
  // overflow 64 bits; a plain file holds exactly its bytes after the header; a gzip file can hold
  // at most deflate's largest expansion (1032:1) of its compressed size.
  uint64_t expected = 1;
  for (int64_t d : shape)
    RG_CHECK(!__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected), "read_idx", path, ": header ",
             shape_str(shape), " describes more than 2^64 bytes");
  const uint64_t file_bytes = std::filesystem::file_size(path);
  const uint64_t header_bytes = 4 + 4 * static_cast<uint64_t>(ndim);
  const bool compressed = gzdirect(f.handle) == 0;
  const uint64_t at_most = compressed ? file_bytes * 1032 : file_bytes - header_bytes;
  RG_CHECK(expected <= at_most, "read_idx", path, ": data truncated: header says ", shape_str(shape), " = ", expected,
           " bytes, file holds ", compressed ? "at most " : "", at_most, compressed ? " (once decompressed)" : "");
  Tensor out = empty(shape, {.dtype = DType::u8});
  const size_t got = read_bytes(f, out.raw_data(), static_cast<size_t>(expected));
  RG_CHECK(got == expected, "read_idx", path, ": data truncated: header says ", shape_str(shape), " = ", expected,
           " bytes, file holds ", got);
  unsigned char extra;
  RG_CHECK(read_bytes(f, &extra, 1) == 0, "read_idx", path, ": trailing bytes after the ", expected,
           " bytes the header ", shape_str(shape), " describes");
  int err = 0;
  gzerror(f.handle, &err);
  RG_CHECK(err == Z_OK || err == Z_STREAM_END, "read_idx", path, ": corrupt compressed data");
  return out;
}

namespace {

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem, stem + ".gz"}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (std::filesystem::exists(path)) return path;
  }
  RG_FAIL("load_mnist", "neither ", stem, " nor ", stem, ".gz found in ", dir,
          " (expected the MNIST file layout; Debian's dataset-fashion-mnist installs it in "
          "/usr/share/datasets/fashion-mnist)");
}

// A split's images (u8, as read) and labels, checked against each other.
std::pair<Tensor, Tensor> read_split(const std::string& dir, const std::string& prefix) {
  const std::string image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  Tensor images = read_idx(image_path), labels = read_idx(label_path);
  RG_CHECK(images.dim() == 3, "load_mnist", image_path, ": images must have 3 dims (N, H, W), got ",
           shape_str(images.shape()));
  RG_CHECK(labels.dim() == 1, "load_mnist", label_path, ": labels must have 1 dim, got ", shape_str(labels.shape()));
  RG_CHECK(images.size(0) == labels.size(0), "load_mnist", image_path, " holds ", images.size(0), " images but ",
           label_path, " holds ", labels.size(0), " labels");
  return {images, labels};
}

// Mean and standard deviation of pixel / 255 over every pixel, from a histogram of the 256 byte
// values: one pass over the bytes, exact sums in double (the pixels are bytes, whatever the file).
std::pair<double, double> pixel_mean_std(const Tensor& images) {
  RG_CHECK(images.dtype() == DType::u8 && images.is_contiguous(), "load_mnist", "images must be dense bytes, got ",
           images.desc());
  std::vector<int64_t> count(256, 0);
  const uint8_t* p = images.data<uint8_t>();
  for (int64_t i = 0, n = images.numel(); i < n; ++i) ++count[p[i]];
  double sum = 0, sum_sq = 0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    sum += static_cast<double>(count[v]) * x;
    sum_sq += static_cast<double>(count[v]) * x * x;
  }
  const double n = static_cast<double>(std::max<int64_t>(images.numel(), 1));
  const double mean = sum / n;
  return {mean, std::sqrt(std::max(0.0, sum_sq / n - mean * mean))};
}

// (N, 1, H, W) f32: (pixel / 255 - mean) / std, one conversion and one affine pass in place.
MnistSplit to_split(const Tensor& images, const Tensor& labels, double mean, double std) {
  Tensor x = images.to(DType::f32);
  x.mul_(1.0 / (255.0 * std)).add_(-mean / std);
  return {x.unsqueeze(1).contiguous(), labels.to(DType::i64)};
}

}  // namespace

Mnist load_mnist(const std::string& dir, bool normalize) {
  Mnist m;
  const auto [train_images, train_labels] = read_split(dir, "train");
  const auto [test_images, test_labels] = read_split(dir, "t10k");
  // Statistics from the training pixels, so any MNIST-format data set works.
  if (normalize) std::tie(m.mean, m.std) = pixel_mean_std(train_images);
  RG_CHECK(m.std > 0, "load_mnist", dir,
           ": every training pixel has the same value, so there is no spread to "
           "normalise by");
  m.train = to_split(train_images, train_labels, m.mean, m.std);
  m.test = to_split(test_images, test_labels, m.mean, m.std);
  return m;
}

}  // namespace ringgrad::data
