// Parameter initialisation, as PyTorch does it.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace ringgrad::nn::init {

// U(-bound, bound) in place.
void uniform_(const Tensor& t, double bound, Generator& gen);
// kaiming_uniform_(a = sqrt(5)): PyTorch's default for Linear and Conv2d weights. With that
// negative slope the gain is sqrt(2 / (1 + 5)), so bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
void kaiming_uniform_default_(const Tensor& weight, int64_t fan_in, Generator& gen);
// N(mean, std) in place.
void normal_(const Tensor& t, double mean, double std, Generator& gen);

}  // namespace ringgrad::nn::init
