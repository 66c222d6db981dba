// LayerNorm and Embedding: the two layers a transformer adds to Linear.
#pragma once

#include "core/ops.h"
#include "nn/module.h"

namespace ringgrad::nn {

// Normalises the last dim (C) to zero mean and unit variance, then scales and shifts (weight 1,
// bias 0 at start, as in PyTorch). x: (..., C) -> (..., C).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5);
  Tensor forward(const Tensor& x) override { return layer_norm(x, weight, bias, eps); }

  Tensor weight, bias;  // (C)
  double eps;
};

// A lookup table: row i is the vector of token i. indices: any shape of i64 -> (*shape, C).
// Initialised N(0, 1) as PyTorch's; GPT re-initialises it (nn/gpt.cpp).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* generator = nullptr);
  Tensor forward(const Tensor& indices) override { return embedding(weight, indices); }

  Tensor weight;  // (num_embeddings, embedding_dim)
};

}  // namespace ringgrad::nn
