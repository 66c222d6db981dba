// softmax, log_softmax and cross_entropy with their backward formulas.
#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

// y = softmax(a);  da = y (g - sum(g y, dim))
Tensor softmax(const Tensor& a, int64_t dim) {
  Tensor y = native::softmax(a, dim, /*log=*/false);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "softmax");
  record("softmax", {y}, {a}, [y = y.detach(), d](const TensorList& g, const NeedsGrad&) {
    Tensor gy = native::binary(BinaryOp::mul, g[0], y);
    Tensor s = y.dim() == 0 ? gy : native::reduce(RowReduction::sum, gy, {d}, /*keepdim=*/true);
    return TensorList{native::binary(BinaryOp::mul, y, native::binary(BinaryOp::sub, g[0], s))};
  });
  return y;
}

// y = log_softmax(a);  da = g - exp(y) sum(g, dim)
Tensor log_softmax(const Tensor& a, int64_t dim) {
  Tensor y = native::softmax(a, dim, /*log=*/true);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(a.dim(), 1), "log_softmax");
  record("log_softmax", {y}, {a}, [y = y.detach(), d](const TensorList& g, const NeedsGrad&) {
    Tensor s = y.dim() == 0 ? g[0] : native::reduce(RowReduction::sum, g[0], {d}, /*keepdim=*/true);
    Tensor p = native::unary(UnaryOp::exp, y);
    return TensorList{native::binary(BinaryOp::sub, g[0], native::binary(BinaryOp::mul, p, s))};
  });
  return y;
}

// loss = mean_i -log softmax(logits_i)[target_i];  dlogits = (softmax - onehot(target)) g / count
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  Tensor count;
  Tensor loss = native::cross_entropy(logits, target, ignore_index, &count);
  record("cross_entropy", {loss}, {logits},
         [logits = logits.detach(), target = target.detach(), ignore_index, count](const TensorList& g,
                                                                                   const NeedsGrad&) {
           return TensorList{native::cross_entropy_backward(g[0], logits, target, ignore_index, count)};
         });
  return loss;
}

}  // namespace ringgrad
