#include "nn/normalization.h"

#include "nn/init.h"

namespace ringgrad::nn {

LayerNorm::LayerNorm(int64_t normalized_size, double eps) : Module("LayerNorm"), eps(eps) {
  RG_CHECK(normalized_size > 0, "LayerNorm", "size must be positive, got ", normalized_size);
  weight = register_parameter("weight", ones({normalized_size}));
  bias = register_parameter("bias", zeros({normalized_size}));
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator* generator) : Module("Embedding") {
  RG_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding", "sizes must be positive, got ", num_embeddings, " x ",
           embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0, generator ? *generator : default_generator());
}

}  // namespace ringgrad::nn
