#include "nn/normalization.h"

#include "autograd/activation_checkpoint.h"
#include "autograd/engine.h"
#include "nn/init.h"

namespace ringgrad::nn {

namespace {

// The biased variance over (N, H, W) of x: (N, C, H, W) about its per-channel mean: (1, C, 1, 1),
// already computed (var() would reduce for the mean again).
Tensor var_of(const Tensor& x, const Tensor& mean) {
  const Tensor d = x - mean;
  return (d * d).mean({0, 2, 3}, /*keepdim=*/true);
}

}  // namespace

LayerNorm::LayerNorm(int64_t normalized_size, double eps) : Module("LayerNorm"), eps(eps) {
  RG_CHECK(normalized_size > 0, "LayerNorm", "size must be positive, got ", normalized_size);
  weight = register_parameter("weight", ones({normalized_size}));
  bias = register_parameter("bias", zeros({normalized_size}));
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : Module("BatchNorm2d"), eps(eps), momentum(momentum) {
  RG_CHECK(num_features > 0, "BatchNorm2d", "num_features must be positive, got ", num_features);
  RG_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "BatchNorm2d", "need eps > 0 and momentum in [0, 1], got ", eps,
           " and ", momentum);
  weight = register_parameter("weight", ones({num_features}));
  bias = register_parameter("bias", zeros({num_features}));
  running_mean = register_buffer("running_mean", zeros({num_features}));
  running_var = register_buffer("running_var", ones({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  const int64_t C = weight.size(0);
  RG_CHECK(x.dim() == 4 && x.size(1) == C, "BatchNorm2d", "input must be (N, ", C, ", H, W), got ", x.desc());
  const bool half = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  const Tensor xc = half ? x.to(DType::f32) : x;  // x: (N, C, H, W)
  const Shape per_channel{1, C, 1, 1};
  Tensor mean, var;  // (1, C, 1, 1)
  if (is_training()) {
    const int64_t n = x.size(0) * x.size(2) * x.size(3);
    RG_CHECK(n > 1, "BatchNorm2d", "training needs more than one value per channel, got ", x.desc());
    mean = xc.mean({0, 2, 3}, /*keepdim=*/true);
    var = var_of(xc, mean);
    // A checkpointed block's recompute sees the same batch again: its statistics are already in.
    if (!autograd::recomputing()) {
      NoGradGuard no_grad;
      const Tensor batch_mean = mean.detach().reshape({C}), batch_var = var.detach().reshape({C}) * (n / (n - 1.0));
      running_mean.copy_(running_mean * (1 - momentum) + batch_mean.to(running_mean.dtype()) * momentum);
      running_var.copy_(running_var * (1 - momentum) + batch_var.to(running_var.dtype()) * momentum);
      num_batches_tracked.copy_(num_batches_tracked + 1.0);
    }
  } else {
    mean = running_mean.to(xc.dtype()).reshape(per_channel);
    var = running_var.to(xc.dtype()).reshape(per_channel);
  }
  const Tensor y = (xc - mean) * rsqrt(var + eps) * weight.to(xc.dtype()).reshape(per_channel) +
                   bias.to(xc.dtype()).reshape(per_channel);
  return half ? y.to(x.dtype()) : y;
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* generator) : Module("Embedding") {
  RG_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding", "sizes must be positive, got ", num_embeddings, " x ",
           embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0, generator ? *generator : default_generator());
}

}  // namespace ringgrad::nn
