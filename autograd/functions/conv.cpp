// Differentiable conv2d, max_pool2d and the fused block of both with ReLU (front ends and gradient formulas in core/native/conv.cpp, kernels
// in core/cpu/conv.cpp and core/cuda/conv.cu).
#include "autograd/engine.h"
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

// y = conv(x, w) + b;  dx = col2im(w^T dy), dw = dy im2col(x)^T, db = sum(dy over N, OH, OW)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding) {
  Tensor out = native::conv2d(x, weight, bias, stride, padding);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record("conv2d", {out}, inputs,
         [x = x.detach(), w = weight.detach(), has_bias = bias.defined(), stride, padding](const TensorList& g,
                                                                                           const NeedsGrad& n) {
           Tensor dx, dw, db;
           native::conv2d_backward(g[0], x, w, stride, padding, n[0] ? &dx : nullptr, n[1] ? &dw : nullptr,
                                   has_bias && n[2] ? &db : nullptr);
           TensorList grads{dx, dw};
           if (has_bias) grads.push_back(db);
           return grads;
         });
  return out;
}

// y = max over each window;  dx = dy routed to each window's argmax
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding) {
  // The backend seam chooses: Note [Max pooling on cuDNN].
  if (native::backend_max_pool_algorithm(x.device(), x.dtype()) == native::MaxPoolAlgorithm::cudnn) {
    Tensor out = native::max_pool2d_cudnn(x, kernel_size, stride, padding);
    record("max_pool2d", {out}, {x},
           [x = x.detach(), y = out.detach(), kernel_size, stride, padding](const TensorList& g, const NeedsGrad&) {
             return TensorList{native::max_pool2d_cudnn_backward(g[0], x, y, kernel_size, stride, padding)};
           });
    return out;
  }
  Tensor indices;
  Tensor out = native::max_pool2d(x, kernel_size, stride, padding, &indices);
  record("max_pool2d", {out}, {x}, [shape = x.shape(), indices](const TensorList& g, const NeedsGrad&) {
    return TensorList{native::max_pool2d_backward(g[0], shape, indices)};
  });
  return out;
}

// y = maxpool(relu(conv(x, w) + b));  dy_conv = dy routed to each window's maximum where y > 0, then
// conv2d's three gradients, all in one kernel per sample (Note [The fused convolution block]).
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                              int64_t padding) {
  if (!native::conv_block_fusable(x, weight, bias, stride, padding))
    return max_pool2d(relu(conv2d(x, weight, bias, stride, padding)), 2);
  Tensor window;
  Tensor out = native::conv2d_relu_max_pool2d(x, weight, bias, stride, padding, &window);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  record("conv2d_relu_max_pool2d", {out}, inputs,
         [x = x.detach(), w = weight.detach(), y = out.detach(), window, has_bias = bias.defined(), stride,
          padding](const TensorList& g, const NeedsGrad& n) {
           Tensor dx, dw, db;
           native::conv2d_relu_max_pool2d_backward(g[0], x, w, y, window, stride, padding, n[0] ? &dx : nullptr,
                                                   n[1] ? &dw : nullptr, has_bias && n[2] ? &db : nullptr);
           TensorList grads{dx, dw};
           if (has_bias) grads.push_back(db);
           return grads;
         });
  return out;
}

}  // namespace ringgrad
