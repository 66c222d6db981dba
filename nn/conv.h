// nn::Conv2d, nn::MaxPool2d, nn::AvgPool2d and nn::AdaptiveAvgPool2d.  x: (N, C, H, W)
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

// A pooling window: k x k, moved by stride (0: k), over input padded by `padding`.
class Pool2d : public Module {
 public:
  int64_t kernel_size, stride, padding;

 protected:
  Pool2d(const char* type, int64_t kernel_size, int64_t stride, int64_t padding)
      : Module(type), kernel_size(kernel_size), stride(stride), padding(padding) {}
};

class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : Pool2d("MaxPool2d", kernel_size, stride, padding) {}
  Tensor forward(const Tensor& x) override;
};

// Average over non-overlapping k x k windows (stride = kernel_size, no padding: the ResNet and
// LeNet cases); rows and columns past the last whole window are dropped, as PyTorch's floor mode
// does. Composed of a reshape and a mean, so autograd and every device come with it. Overlapping or
// padded windows are refused with an error rather than approximated.
class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : Pool2d("AvgPool2d", kernel_size, stride, padding) {}
  Tensor forward(const Tensor& x) override;
};

// (N, C, H, W) -> (N, C, out_h, out_w), each output the mean of its H / out_h x W / out_w block.
// AdaptiveAvgPool2d(1) is global average pooling. out_h must divide H and out_w divide W (PyTorch's
// uneven bins are not built; an error says so).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(int64_t out_h, int64_t out_w = 0)
      : Module("AdaptiveAvgPool2d"), out_h(out_h), out_w(out_w > 0 ? out_w : out_h) {}
  Tensor forward(const Tensor& x) override;

  int64_t out_h, out_w;
};

}  // namespace ringgrad::nn
