// nn::Conv2d and nn::MaxPool2d.  x: (N, C, H, W)
#pragma once

#include "core/random.h"
#include "nn/module.h"

namespace ringgrad::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  bool bias = true;
  Generator* generator = nullptr;  // for initialisation; null = default_generator()
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, O, OH, OW)

  Tensor weight;  // (O, C, K, K)
  Tensor bias;    // (O) or undefined
  int64_t stride, padding;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : Module("MaxPool2d"), kernel_size(kernel_size), stride(stride), padding(padding) {}
  Tensor forward(const Tensor& x) override;

  int64_t kernel_size, stride, padding;
};

}  // namespace ringgrad::nn
