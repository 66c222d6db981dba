// nn::functional: stateless building blocks (torch.nn.functional). Most forward to core/ops.h.
#pragma once

#include "core/ops.h"

namespace ringgrad::nn::functional {

// logits: (N, C), target: (N) i64 -> mean loss over targets != ignore_index
inline Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100) {
  return ringgrad::cross_entropy(logits, target, ignore_index);
}
inline Tensor softmax(const Tensor& x, int64_t dim) { return ringgrad::softmax(x, dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return ringgrad::log_softmax(x, dim); }
inline Tensor relu(const Tensor& x) { return ringgrad::relu(x); }
inline Tensor gelu(const Tensor& x) { return ringgrad::gelu(x); }
// Inverted dropout: in training, zeroes each element with probability p and scales the rest by
// 1 / (1 - p), so evaluation needs no rescaling. Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
Tensor dropout(const Tensor& x, double p, bool training);  // dropout_generator(): per rank by default
// mean((input - target)^2)
Tensor mse_loss(const Tensor& input, const Tensor& target);
// Fraction of rows whose argmax equals the target. logits: (N, C), target: (N) i64.
double accuracy(const Tensor& logits, const Tensor& target);
// Number of rows whose argmax equals the target.
int64_t correct_count(const Tensor& logits, const Tensor& target);

}  // namespace ringgrad::nn::functional

namespace ringgrad::nn {
namespace F = functional;
}
