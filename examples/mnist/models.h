// The two MNIST models of ../../shared/WORKLOADS.md (W1 and W2).
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

inline std::shared_ptr<nn::Sequential> make_model(const std::string& name) {
  if (name == "mlp") return make_mlp();
  if (name == "cnn") return make_cnn();
  throw Error("[mnist] unknown --model '" + name + "' (expected mlp or cnn)");
}

}  // namespace mnist
