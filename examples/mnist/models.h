// The two MNIST models of ../../shared/WORKLOADS.md (W1 and W2), and a small residual network.
#pragma once

#include <memory>
#include <string>

#include <ringgrad.h>

namespace mnist {

using namespace ringgrad;

// W1: 784-512-ReLU-512-ReLU-10.  x: (B, 1, 28, 28) -> logits (B, 10)
inline std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 10)});
}

// W2: conv(1->32, k3, p1) ReLU maxpool2 -> conv(32->64, k3, p1) ReLU maxpool2 -> flatten(3136)
//     -> 128 ReLU -> 10.   x: (B, 1, 28, 28) -> logits (B, 10)
inline std::shared_ptr<nn::Sequential> make_cnn() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(32, 64, 3, nn::Conv2dOptions{.padding = 1}),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3136, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

// He et al.'s basic residual block at constant width: relu(x + bn2(conv2(relu(bn1(conv1(x)))))).
// The convolutions carry no bias: the BatchNorm after each adds its own shift.
//   x: (B, C, H, W) -> (B, C, H, W)
class ResidualBlock : public nn::Module {
 public:
  explicit ResidualBlock(int64_t channels) : Module("ResidualBlock") {
    const nn::Conv2dOptions same{.padding = 1, .bias = false};
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(channels, channels, 3, same));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(channels));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(channels, channels, 3, same));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(channels));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu((*bn1)((*conv1)(x)));
    h = (*bn2)((*conv2)(h));
    return relu(x + h);  // the identity branch: gradients reach the stem unattenuated
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
};

// A ResNet in miniature: a stem, a residual stage at 28 x 28, a strided widening convolution, a
// residual stage at 14 x 14, global average pooling, dropout and a linear head. Its BatchNorm
// running statistics are buffers, which DDP broadcasts from rank 0 at every forward.
//   x: (B, 1, 28, 28) -> logits (B, 10)
inline std::shared_ptr<nn::Sequential> make_resnet() {
  const nn::Conv2dOptions same{.padding = 1, .bias = false};
  const nn::Conv2dOptions halve{.stride = 2, .padding = 1, .bias = false};
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 16, 3, same), std::make_shared<nn::BatchNorm2d>(16),
      std::make_shared<nn::ReLU>(),  // (B, 16, 28, 28)
      std::make_shared<ResidualBlock>(16), std::make_shared<ResidualBlock>(16),
      std::make_shared<nn::Conv2d>(16, 32, 3, halve), std::make_shared<nn::BatchNorm2d>(32),
      std::make_shared<nn::ReLU>(),  // (B, 32, 14, 14)
      std::make_shared<ResidualBlock>(32), std::make_shared<ResidualBlock>(32),
      std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),  // (B, 32)
      std::make_shared<nn::Dropout>(0.1), std::make_shared<nn::Linear>(32, 10)});
}

inline std::shared_ptr<nn::Sequential> make_model(const std::string& name) {
  if (name == "mlp") return make_mlp();
  if (name == "cnn") return make_cnn();
  if (name == "resnet") return make_resnet();
  throw Error("[mnist] unknown --model '" + name + "' (expected mlp, cnn or resnet)");
}

}  // namespace mnist
