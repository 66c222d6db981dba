// nn::Linear: y = x W^T + b.  x: (..., in_features) -> (..., out_features)
#pragma once

#include "core/random.h"
#include "nn/module.h"

namespace ringgrad::nn {

struct LinearOptions {
  bool bias = true;
  Generator* generator = nullptr;  // for initialisation; null = default_generator()
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  Tensor forward(const Tensor& x) override;

  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features) or undefined
};

}  // namespace ringgrad::nn
