// The IDX file format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
//   bytes 0-1: 0, bytes 2: element type (0x08 = unsigned byte), byte 3: number of dims
//   then one big-endian u32 per dim, then the elements, row-major.
// Files may be gzip-compressed (.gz) or raw; zlib reads both.
#pragma once

#include <string>

#include "core/tensor.h"
#include "data/dataset.h"

namespace ringgrad::data {

// Reads an IDX file of unsigned bytes into a u8 tensor of its dims. Any problem (missing file,
// truncated header or data, bad magic, unsupported type, trailing bytes) is a ringgrad::Error that
// names the file and what is wrong.
Tensor read_idx(const std::string& path);

struct MnistSplit {
  Tensor images;  // (N, 1, 28, 28) f32, normalised with the training set's mean and std
  Tensor labels;  // (N) i64
};

struct Mnist {
  MnistSplit train, test;
  double mean = 0, std = 1;  // applied to both splits: (pixel / 255 - mean) / std
};

// Loads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir` (the layout of the original
// MNIST and of Debian's dataset-fashion-mnist) and checks that images and labels agree. With
// `normalize`, pixels are standardised with the training set's mean and std; without, they are
// pixel / 255 in [0, 1] (torchvision's ToTensor()).
Mnist load_mnist(const std::string& dir, bool normalize = true);

}  // namespace ringgrad::data
