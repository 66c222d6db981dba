#include "nn/linear.h"

#include <cmath>

#include "core/ops.h"
#include "nn/init.h"

namespace ringgrad::nn {

// Initialisation as torch.nn.Linear: weight kaiming-uniform (bound 1/sqrt(in)), bias U(±1/sqrt(in)).
Linear::Linear(int64_t in_features, int64_t out_features, LinearOptions options) : Module("Linear") {
  RG_CHECK(in_features > 0 && out_features > 0, "Linear", "features must be positive, got in ", in_features, ", out ",
           out_features);
  Generator& gen = options.generator ? *options.generator : default_generator();
  weight = register_parameter("weight", empty({out_features, in_features}));
  init::kaiming_uniform_default_(weight, in_features, gen);
  if (options.bias) {
    bias = register_parameter("bias", empty({out_features}));
    init::uniform_(bias, 1.0 / std::sqrt(static_cast<double>(in_features)), gen);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

}  // namespace ringgrad::nn
