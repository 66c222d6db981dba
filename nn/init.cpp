#include "nn/init.h"

#include <cmath>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad::nn::init {

void uniform_(const Tensor& t, double bound, Generator& gen) {
  NoGradGuard no_grad;
  native::copy_(t, uniform(t.shape(), -bound, bound, gen, {.dtype = t.dtype(), .device = t.device()}));
}

void kaiming_uniform_default_(const Tensor& weight, int64_t fan_in, Generator& gen) {
  uniform_(weight, 1.0 / std::sqrt(static_cast<double>(fan_in)), gen);
}

void normal_(const Tensor& t, double mean, double std, Generator& gen) {
  NoGradGuard no_grad;
  native::copy_(t, normal(t.shape(), mean, std, gen, {.dtype = t.dtype(), .device = t.device()}));
}

}  // namespace ringgrad::nn::init
