#include "nn/conv.h"

#include <cmath>

#include "core/ops.h"
#include "nn/init.h"

namespace ringgrad::nn {

// Initialisation as torch.nn.Conv2d: fan_in = C * K * K; weight kaiming-uniform, bias U(±1/sqrt(fan_in)).
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options)
    : Module("Conv2d"), stride(options.stride), padding(options.padding) {
  RG_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0, "Conv2d",
           "channels and kernel size must be "
           "positive, got ",
           in_channels, ", ", out_channels, ", ", kernel_size);
  Generator& gen = options.generator ? *options.generator : default_generator();
  const int64_t fan_in = in_channels * kernel_size * kernel_size;
  weight = register_parameter("weight", empty({out_channels, in_channels, kernel_size, kernel_size}));
  init::kaiming_uniform_default_(weight, fan_in, gen);
  if (options.bias) {
    bias = register_parameter("bias", empty({out_channels}));
    init::uniform_(bias, 1.0 / std::sqrt(static_cast<double>(fan_in)), gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding); }

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel_size, stride, padding); }

}  // namespace ringgrad::nn
