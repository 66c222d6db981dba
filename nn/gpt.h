// GPT: the GPT-2 architecture, small. Token and learned position embeddings, n_layer pre-LayerNorm
// blocks (causal self-attention, then a 4x MLP with tanh-GELU, each added to the residual stream),
// a final LayerNorm, and a language-model head that reuses the token embedding (tied weights).
//
//   idx: (B, T) i64 token ids, T <= block_size  ->  logits: (B, T, vocab_size)
//
// Parameter names follow GPT-2 / nanoGPT: wte, wpe, h.0.ln_1, h.0.attn.c_attn, h.0.attn.c_proj,
// h.0.ln_2, h.0.mlp.c_fc, h.0.mlp.c_proj, ..., ln_f.
#pragma once

#include <memory>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "nn/sequential.h"

namespace ringgrad::nn {

struct GPTConfig {
  int64_t vocab_size = 0;
  int64_t block_size = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;  // after the embeddings, on each residual branch and on the attention
                         // probabilities (GPT-2's embd / resid / attn pdrop, one value); masks come
                         // from default_generator()
};

// x: (B, T, C) -> (B, T, C). One projection makes q, k, v for all heads at once.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& config, Generator& gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_attn;  // C -> 3C
  std::shared_ptr<Linear> c_proj;  // C -> C, a residual projection
  int64_t n_head;
  double dropout;  // on the attention probabilities, in training mode
};

// x: (B, T, C) -> (B, T, C): C -> 4C, GELU, 4C -> C.
class MLP : public Module {
 public:
  MLP(const GPTConfig& config, Generator& gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> c_fc, c_proj;
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)): pre-LayerNorm, as GPT-2.
class Block : public Module {
 public:
  Block(const GPTConfig& config, Generator& gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
  std::shared_ptr<Dropout> drop;
};

class GPT : public Module {
 public:
  // Initialisation as GPT-2: every weight N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2
  // n_layer)) (so the residual stream's variance does not grow with depth), biases 0, LayerNorms 1 / 0.
  explicit GPT(const GPTConfig& config, Generator* generator = nullptr);
  Tensor forward(const Tensor& idx) override;  // (B, T) i64 -> (B, T, vocab_size)

  const GPTConfig& config() const { return config_; }

  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Sequential> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Dropout> drop;

 private:
  GPTConfig config_;
};

}  // namespace ringgrad::nn
