// nn::Sequential: children named "0", "1", ... applied in order.
#pragma once

#include <initializer_list>

#include "nn/containers.h"

namespace ringgrad::nn {

// A ModuleList whose forward chains its modules.
//
// A run Conv2d, ReLU, MaxPool2d(2) (a 2 x 2 window, stride 2, no padding) is computed as one op,
// conv2d_relu_max_pool2d (core/ops.h): on the CPU one fused kernel, bit for bit the three modules'
// output and input / weight gradients (Note [The fused convolution block], core/cpu/conv_block.cpp).
// Only where calling the three modules one by one could not differ: none of them has forward
// hooks or activation checkpointing set, and each is exactly that class (not a subclass with a
// forward of its own). RINGGRAD_FUSION=off (core/fusion.h) runs the plain ops instead.
class Sequential : public ModuleList {
 public:
  Sequential() : ModuleList("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : ModuleList("Sequential") {
    for (const auto& m : modules) push_back(m);
  }
  Tensor forward(const Tensor& x) override;

 private:
  // Whether modules i, i + 1, i + 2 are a convolution block computed as one op (see above).
  bool is_conv_block(size_t i) const;
};

}  // namespace ringgrad::nn
