#include "nn/functional.h"

#include "autograd/engine.h"
#include "core/native/native.h"

namespace ringgrad::nn::functional {

// The mask is drawn where x lives, from the generator's (seed, offset) -- on a GPU by the kernel itself,
// with nothing copied from the host -- and never stored: the backward draws it again from the same
// numbers (native::dropout, the rule attention dropout uses too).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  RG_CHECK(p >= 0 && p < 1, "dropout", "p must be in [0, 1), got ", p);
  if (!training || p == 0) return x;
  const uint64_t seed = gen.seed(), offset = gen.advance((static_cast<uint64_t>(x.numel()) + 3) / 4);
  Tensor out = native::dropout(x, p, seed, offset);
  autograd::record("dropout", {out}, {x}, [p, seed, offset](const autograd::TensorList& g, const autograd::NeedsGrad&) {
    return autograd::TensorList{native::dropout(g[0], p, seed, offset)};
  });
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, dropout_generator()); }

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  RG_CHECK(input.shape() == target.shape(), "mse_loss", "input ", input.desc(), " and target ", target.desc(),
           " differ in shape");
  Tensor d = input - target;
  return (d * d).mean();
}

int64_t correct_count(const Tensor& logits, const Tensor& target) {
  RG_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0), "accuracy",
           "expects logits (N, C) and target (N), got ", logits.desc(), " and ", target.desc());
  NoGradGuard no_grad;
  Tensor hits = eq(argmax(logits, 1), target.to(DType::i64));
  return static_cast<int64_t>(hits.to(DType::i64).sum().item());
}

double accuracy(const Tensor& logits, const Tensor& target) {
  if (logits.size(0) == 0) return 0.0;
  return static_cast<double>(correct_count(logits, target)) / static_cast<double>(logits.size(0));
}

}  // namespace ringgrad::nn::functional
