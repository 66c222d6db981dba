// LayerNorm and Embedding, the two layers a transformer adds to Linear; BatchNorm2d for CNNs.
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

// Batch normalisation over (N, H, W) per channel (Ioffe & Szegedy, 2015), as PyTorch's BatchNorm2d.
// x: (N, C, H, W) -> (N, C, H, W). Training: normalises with the batch's mean and biased variance,
// and updates the running statistics, running = (1 - momentum) running + momentum batch (the
// variance unbiased, n / (n - 1)). Eval: normalises with the running statistics. Composed of
// differentiable ops (gradchecked), so every device and dtype is covered; f16 / bf16 inputs are
// normalised in f32. Under DDP every rank normalises with its own batch (no SyncBatchNorm); the
// running statistics are buffers, which DDP broadcasts from rank 0 at each forward.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;

  Tensor weight, bias;               // (C): scale 1, shift 0 at start
  Tensor running_mean, running_var;  // (C) buffers: 0 and 1 at start
  Tensor num_batches_tracked;        // () i64 buffer
  double eps, momentum;
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
