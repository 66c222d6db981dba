#include "nn/sequential.h"

#include <typeinfo>

#include "core/ops.h"
#include "nn/activation.h"
#include "nn/conv.h"

namespace ringgrad::nn {
namespace {

// The module is exactly class M and called plainly: no hooks, no activation checkpointing.
template <class M>
const M* plain(const std::shared_ptr<Module>& module) {
  const Module& m = *module;
  if (typeid(m) != typeid(M) || m.has_forward_hooks() || m.activations_checkpointed()) return nullptr;
  return static_cast<const M*>(module.get());
}

}  // namespace

bool Sequential::is_conv_block(size_t i) const {
  if (i + 2 >= size()) return false;
  const auto* pool = plain<MaxPool2d>((*this)[i + 2]);
  return plain<Conv2d>((*this)[i]) && plain<ReLU>((*this)[i + 1]) && pool && pool->kernel_size == 2 &&
         (pool->stride == 0 || pool->stride == 2) && pool->padding == 0;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) {
    if (is_conv_block(i)) {
      const auto& conv = static_cast<const Conv2d&>(*(*this)[i]);
      try {
        h = conv2d_relu_max_pool2d(h, conv.weight, conv.bias, conv.stride, conv.padding);
      } catch (const Error&) {
        rethrow_with_path_of(conv);  // the error names the convolution, as its own call would
      }
      i += 2;
      continue;
    }
    h = (*(*this)[i])(h);
  }
  return h;
}

}  // namespace ringgrad::nn
