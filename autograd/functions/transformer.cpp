// The differentiable pieces of a transformer block: embedding, layer_norm, the causal
// scale-mask-softmax and causal self-attention (front ends in core/native/transformer.cpp, kernels in
// core/{cpu,cuda}/rows.* and core/{cpu,cuda}/attention.*).
#include <cmath>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

// out[..., :] = weight[indices[...], :];  dweight = zeros, rows indices[k] += g rows k (scatter-add:
// a token that appears twice gets both gradients).
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  RG_CHECK(weight.defined() && weight.dim() == 2, "embedding", "weight must be (vocab, C), got ",
           weight.defined() ? weight.desc() : std::string("undefined"));
  RG_CHECK(indices.defined() && indices.dtype() == DType::i64, "embedding", "indices must be i64, got ",
           indices.defined() ? indices.desc() : std::string("undefined"));
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  // index_select checks the range (naming the bad index) and records the scatter-add backward.
  return index_select(weight, 0, indices.reshape({indices.numel()})).reshape(shape);
}

// y = (x - mean) rstd * w + b over the last dim; backward in one fused pass per row.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  native::LayerNormOutput out = native::layer_norm(x, weight, bias, eps);
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  record("layer_norm", {out.y}, inputs,
         [x = x.detach(), w = weight.defined() ? weight.detach() : Tensor(), has_bias = bias.defined(), mean = out.mean,
          rstd = out.rstd](const TensorList& g, const NeedsGrad& n) {
           const bool has_weight = w.defined();
           const size_t bias_slot = has_weight ? 2 : 1;
           Tensor dx, dw, db;
           native::layer_norm_backward(g[0], x, w, mean, rstd, n[0] ? &dx : nullptr, has_weight && n[1] ? &dw : nullptr,
                                       has_bias && n[bias_slot] ? &db : nullptr);
           TensorList grads{dx};
           if (has_weight) grads.push_back(dw);
           if (has_bias) grads.push_back(db);
           return grads;
         });
  return out.y;
}

// y = causal softmax(scale * scores);  dscores = scale y (g - sum(g y)) on the visible entries.
Tensor causal_softmax(const Tensor& scores, double scale) {
  Tensor y = native::causal_softmax(scores, scale);
  record("causal_softmax", {y}, {scores}, [y = y.detach(), scale](const TensorList& g, const NeedsGrad&) {
    return TensorList{native::causal_softmax_backward(g[0], y, scale)};
  });
  return y;
}

// q, k, v: (B, H, T, D).  att = causal_softmax(q k^T / sqrt(D)): (B, H, T, T);  y = att v: (B, H, T, D).
// Memory O(B H T^2): fine for the block sizes of the examples (T <= 256).
Tensor causal_self_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  RG_CHECK(q.defined() && q.dim() == 4 && k.defined() && v.defined() && k.shape() == q.shape() &&
               v.shape() == q.shape(),
           "causal_self_attention", "q, k, v must all be (B, H, T, D), got ", q.desc(), ", ", k.desc(), ", ", v.desc());
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  // Batched over B·H: (BH, T, D) @ (BH, D, T) -> (BH, T, T).
  Tensor qf = q.reshape({B * H, T, D}), kf = k.reshape({B * H, T, D}), vf = v.reshape({B * H, T, D});
  Tensor scores = bmm(qf, kf.transpose(1, 2));
  Tensor att = causal_softmax(scores, 1.0 / std::sqrt(static_cast<double>(D)));
  return bmm(att, vf).reshape({B, H, T, D});
}

// qkv: (B, T, 3C) -> (B, T, C): the same attention straight from the packed projection (Note
// [Attention without head copies] in core/cpu/attention.cpp). Saves qkv and the probabilities, or,
// from the fused CPU kernel, y and each row's log-sum-exp (Note [Fused causal attention] in
// core/cpu/fused_attention.cpp).
Tensor causal_self_attention(const Tensor& qkv, int64_t n_head, double dropout, Generator& gen) {
  const int64_t probabilities = qkv.dim() == 3 && n_head > 0 ? qkv.size(0) * n_head * qkv.size(1) * qkv.size(1) : 0;
  const uint64_t seed = gen.seed();
  // One Philox counter per four probabilities, reserved only when dropout draws any.
  const uint64_t offset = dropout > 0 ? gen.advance(static_cast<uint64_t>(probabilities + 3) / 4) : 0;
  native::AttentionOutput out = native::causal_self_attention(qkv, n_head, dropout, seed, offset);
  native::AttentionOutput saved{Tensor(), out.att, out.y_compute.defined() ? out.y_compute.detach() : Tensor(),
                                out.lse};
  record("causal_self_attention", {out.y}, {qkv},
         [qkv = qkv.detach(), saved, n_head, dropout, seed, offset](const TensorList& g, const NeedsGrad&) {
           return TensorList{native::causal_self_attention_backward(g[0], qkv, saved, n_head, dropout, seed, offset)};
         });
  return out.y;
}

Tensor causal_self_attention(const Tensor& qkv, int64_t n_head) {
  return causal_self_attention(qkv, n_head, 0.0, default_generator());
}

}  // namespace ringgrad
