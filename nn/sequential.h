// nn::Sequential: children named "0", "1", ... applied in order.
#pragma once

#include <initializer_list>

#include "nn/containers.h"

namespace ringgrad::nn {

// A ModuleList whose forward chains its modules.
class Sequential : public ModuleList {
 public:
  Sequential() : ModuleList("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : ModuleList("Sequential") {
    for (const auto& m : modules) push_back(m);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& layer : *this) h = (*layer)(h);
    return h;
  }
};

}  // namespace ringgrad::nn
