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

namespace {

// x: (N, C, H, W) -> (N, C, H / bh, W / bw), the mean of each bh x bw block (H, W multiples of them).
Tensor block_mean(const Tensor& x, int64_t bh, int64_t bw) {
  const Shape& s = x.shape();
  return x.contiguous().reshape({s[0], s[1], s[2] / bh, bh, s[3] / bw, bw}).mean({3, 5});
}

void check_nchw(const char* op, const Tensor& x) {
  RG_CHECK(x.dim() == 4, op, "input must be (N, C, H, W), got ", x.desc());
}

}  // namespace

Tensor AvgPool2d::forward(const Tensor& x) {
  check_nchw("AvgPool2d", x);
  const int64_t k = kernel_size, s = stride > 0 ? stride : kernel_size;
  RG_CHECK(k > 0, "AvgPool2d", "kernel_size must be positive, got ", k);
  RG_CHECK(s == k && padding == 0, "AvgPool2d",
           "only non-overlapping windows without padding are built (stride = ", "kernel_size = ", k,
           ", padding 0); got stride ", s, ", padding ", padding, " for ", x.desc());
  const int64_t h = x.size(2) / k * k, w = x.size(3) / k * k;
  RG_CHECK(h > 0 && w > 0, "AvgPool2d", "input ", x.desc(), " is smaller than the ", k, " x ", k, " window");
  const Tensor whole = h == x.size(2) && w == x.size(3) ? x : x.narrow(2, 0, h).narrow(3, 0, w);
  return block_mean(whole, k, k);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_nchw("AdaptiveAvgPool2d", x);
  RG_CHECK(out_h > 0 && out_w > 0 && x.size(2) % out_h == 0 && x.size(3) % out_w == 0, "AdaptiveAvgPool2d", "output (",
           out_h, ", ", out_w, ") must divide the input's (H, W) = (", x.size(2), ", ", x.size(3), ") of ", x.desc(),
           " (uneven bins are not built)");
  return block_mean(x, x.size(2) / out_h, x.size(3) / out_w);
}

}  // namespace ringgrad::nn
