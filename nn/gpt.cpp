#include "nn/gpt.h"

#include <cmath>
#include <typeinfo>

#include "autograd/engine.h"
#include "nn/init.h"

namespace ringgrad::nn {

namespace {

// GPT-2's initialisation of a Linear: weight N(0, std), bias 0.
std::shared_ptr<Linear> gpt_linear(int64_t in, int64_t out, double std, Generator& gen) {
  auto layer = std::make_shared<Linear>(in, out, LinearOptions{.bias = true, .generator = &gen});
  init::normal_(layer->weight, 0.0, std, gen);
  autograd::NoGradGuard no_grad;  // initialisation is not part of any graph
  layer->bias.zero_();
  return layer;
}

constexpr double kInitStd = 0.02;

double residual_std(const GPTConfig& c) { return kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layer)); }

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c, Generator& gen)
    : Module("CausalSelfAttention"), n_head(c.n_head), dropout(c.dropout) {
  c_attn = register_module("c_attn", gpt_linear(c.n_embd, 3 * c.n_embd, kInitStd, gen));
  c_proj = register_module("c_proj", gpt_linear(c.n_embd, c.n_embd, residual_std(c), gen));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  // x: (B, T, C) -> qkv: (B, T, 3C) -> each head attends causally -> (B, T, C) -> output projection.
  const double rate = is_training() ? dropout : 0.0;
  return (*c_proj)(causal_self_attention((*c_attn)(x), n_head, rate, dropout_generator()));
}

MLP::MLP(const GPTConfig& c, Generator& gen) : Module("MLP") {
  c_fc = register_module("c_fc", gpt_linear(c.n_embd, 4 * c.n_embd, kInitStd, gen));
  c_proj = register_module("c_proj", gpt_linear(4 * c.n_embd, c.n_embd, residual_std(c), gen));
}

// c_fc and the GELU as one op (linear_gelu: the GELU in the GEMM's epilogue, the same values) when
// c_fc is called plainly -- exactly a Linear with a bias, no hooks, no checkpoint of its own --
// else the modules as written.
Tensor MLP::forward(const Tensor& x) {
  const Module& fc = *c_fc;
  if (typeid(fc) == typeid(Linear) && !fc.has_forward_hooks() && !fc.activations_checkpointed() &&
      c_fc->bias.defined()) {
    Tensor h;
    try {
      h = linear_gelu(x, c_fc->weight, c_fc->bias);
    } catch (const Error&) {
      rethrow_with_path_of(fc);  // the error names c_fc, as its own call would
    }
    return (*c_proj)(h);
  }
  return (*c_proj)(gelu((*c_fc)(x)));
}

Block::Block(const GPTConfig& c, Generator& gen) : Module("Block") {
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c, gen));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd));
  mlp = register_module("mlp", std::make_shared<MLP>(c, gen));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
}

Tensor Block::forward(const Tensor& x) {
  Tensor h = x + (*drop)((*attn)((*ln_1)(x)));
  return h + (*drop)((*mlp)((*ln_2)(h)));
}

GPT::GPT(const GPTConfig& c, Generator* generator) : Module("GPT"), config_(c) {
  RG_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0, "GPT",
           "every size must be positive: vocab_size ", c.vocab_size, ", block_size ", c.block_size, ", n_layer ",
           c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd);
  RG_CHECK(c.n_embd % c.n_head == 0, "GPT", "n_embd ", c.n_embd, " must be divisible by n_head ", c.n_head);
  Generator& gen = generator ? *generator : default_generator();
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, &gen));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, &gen));
  init::normal_(wte->weight, 0.0, kInitStd, gen);
  init::normal_(wpe->weight, 0.0, kInitStd, gen);
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  h = register_module("h", std::make_shared<Sequential>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c, gen));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd));
}

Tensor GPT::forward(const Tensor& idx) {
  RG_CHECK(idx.defined() && idx.dim() == 2 && idx.dtype() == DType::i64, "GPT",
           "idx must be (B, T) i64 token ids, got ", idx.defined() ? idx.desc() : std::string("undefined"));
  const int64_t T = idx.size(1);
  RG_CHECK(T <= config_.block_size, "GPT", "sequence length ", T, " exceeds block_size ", config_.block_size);
  Tensor pos = arange(0, static_cast<double>(T), 1.0, {.dtype = DType::i64, .device = idx.device()});
  Tensor x = (*drop)((*wte)(idx) + (*wpe)(pos));  // (B, T, C) + (T, C)
  x = (*ln_f)((*h)(x));
  return linear(x, wte->weight);  // tied head: (B, T, C) @ (V, C)^T -> (B, T, V)
}

}  // namespace ringgrad::nn
