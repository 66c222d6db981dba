// Front ends of the fused kernels a transformer block needs: layer_norm (forward and backward in one
// pass over each row), the causal scale-mask-softmax of attention (and its backward), dropout, and
// causal self-attention straight from the packed projection. They check arguments, make the inputs
// dense in the compute dtype (f16 / bf16 compute in f32 and round once, f64 stays f64), allocate the
// outputs and call the kernel of the tensors' device through the backend seam: core/cpu/rows.cpp and
// core/cpu/attention.cpp, core/cuda/rows.cu and core/cuda/attention.cu (Note [Attention without head
// copies] in core/cpu/attention.cpp).
#include <cmath>

#include "core/fusion.h"
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/profiler.h"

namespace ringgrad::native {
namespace {

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t as a dense tensor of dtype dt: t itself when it already is one, else a copy (cast copies).
Tensor dense(const Tensor& t, DType dt) { return t.dtype() == dt ? contiguous(t) : cast(t, dt); }

// The useful FLOPs of causal attention's products over B sequences of T positions and C = heads x D
// channels: each of the T (T + 1) / 2 (query, key) pairs of a head takes a D-long dot product for
// its score and a D-long update of its output, 2 D FLOPs each. The backward has four such products
// (the gradients of the probabilities, values, queries and keys). The CPU kernel computes whole
// 32-row blocks, about a quarter more at T = 128 than these pairs.
double attention_flops(int64_t B, int64_t T, int64_t C) {
  return 2.0 * static_cast<double>(B) * static_cast<double>(C) * static_cast<double>(T) * static_cast<double>(T + 1);
}

// t's data, or null for an undefined (optional, or not wanted) tensor.
void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

}  // namespace

LayerNormOutput layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  RG_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() >= 1, "layer_norm",
           "x must be a floating-point tensor (..., C), got ", x.defined() ? x.desc() : std::string("undefined"));
  const int64_t C = x.size(-1);
  for (const Tensor* p : {&weight, &bias})
    RG_CHECK(!p->defined() ||
                 (p->dim() == 1 && p->size(0) == C && p->dtype() == x.dtype() && p->device() == x.device()),
             "layer_norm", "weight and bias must be (", C, ",) ", dtype_name(x.dtype()), " on ", x.device().str(),
             " like x ", x.desc(), ", got ", p->desc());
  RG_CHECK(eps > 0, "layer_norm", "eps must be positive, got ", eps);
  profiler::OpScope op("layer_norm", 0, 2 * static_cast<double>(x.nbytes()));  // x in, y out
  const DType ct = compute_dtype(x.dtype());
  Tensor xd = dense(x, ct);
  Tensor w = weight.defined() ? dense(weight, ct) : Tensor(), b = bias.defined() ? dense(bias, ct) : Tensor();
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor y = empty(x.shape(), ct, x.device());
  LayerNormOutput out{Tensor(), empty({rows}, ct, x.device()), empty({rows}, ct, x.device())};
  backend_layer_norm_rows(x.device(), ct, xd.raw_data(), ptr_or_null(w), ptr_or_null(b), y.raw_data(),
                          out.mean.raw_data(), out.rstd.raw_data(), rows, C, eps);
  out.y = dense(y, x.dtype());
  return out;
}

void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         Tensor* dx, Tensor* dweight, Tensor* dbias) {
  const DType ct = mean.dtype();
  profiler::OpScope op("layer_norm_backward", 0, 3 * static_cast<double>(x.nbytes()));  // g and x in, dx out
  const int64_t C = x.size(-1), rows = C ? x.numel() / C : 0;
  Tensor gd = dense(g, ct), xd = dense(x, ct), w = weight.defined() ? dense(weight, ct) : Tensor();
  Tensor dxt = dx ? empty(x.shape(), ct, x.device()) : Tensor();
  Tensor dwt = dweight ? empty({C}, ct, x.device()) : Tensor();
  Tensor dbt = dbias ? empty({C}, ct, x.device()) : Tensor();
  backend_layer_norm_backward_rows(x.device(), ct, gd.raw_data(), xd.raw_data(), ptr_or_null(w), mean.raw_data(),
                                   rstd.raw_data(), ptr_or_null(dxt), ptr_or_null(dwt), ptr_or_null(dbt), rows, C);
  if (dx) *dx = dense(dxt, x.dtype());
  if (dweight) *dweight = dense(dwt, x.dtype());
  if (dbias) *dbias = dense(dbt, x.dtype());
}

Tensor causal_softmax(const Tensor& scores, double scale) {
  RG_CHECK(scores.defined() && is_floating(scores.dtype()) && scores.dim() >= 2 && scores.size(-1) == scores.size(-2),
           "causal_softmax", "scores must be a floating-point (..., T, T) tensor, got ",
           scores.defined() ? scores.desc() : std::string("undefined"));
  profiler::OpScope op("causal_softmax", 0, 2 * static_cast<double>(scores.nbytes()));
  const DType ct = compute_dtype(scores.dtype());
  Tensor s = dense(scores, ct);
  Tensor y = empty(scores.shape(), ct, scores.device());
  const int64_t n = scores.size(-1), mats = n ? scores.numel() / (n * n) : 0;
  backend_causal_softmax_rows(scores.device(), ct, s.raw_data(), y.raw_data(), mats, n, scale);
  return dense(y, scores.dtype());
}

Tensor causal_softmax_backward(const Tensor& g, const Tensor& y, double scale) {
  profiler::OpScope op("causal_softmax_backward", 0, 3 * static_cast<double>(y.nbytes()));
  const DType ct = compute_dtype(y.dtype());
  Tensor gd = dense(g, ct), yd = dense(y, ct);
  Tensor ds = empty(y.shape(), ct, y.device());
  const int64_t n = y.size(-1), mats = n ? y.numel() / (n * n) : 0;
  backend_causal_softmax_backward_rows(y.device(), ct, gd.raw_data(), yd.raw_data(), ds.raw_data(), mats, n, scale);
  return dense(ds, y.dtype());
}

Tensor dropout(const Tensor& x, double rate, uint64_t seed, uint64_t offset) {
  RG_CHECK(x.defined() && is_floating(x.dtype()), "dropout", "expects a floating-point tensor, got ",
           x.defined() ? x.desc() : std::string("undefined"));
  RG_CHECK(rate >= 0 && rate < 1, "dropout", "rate must be in [0, 1), got ", rate);
  profiler::OpScope op("dropout", 0, 2 * static_cast<double>(x.nbytes()));
  const DType ct = compute_dtype(x.dtype());
  Tensor in = dense(x, ct);
  Tensor out = empty(x.shape(), ct, x.device());
  backend_dropout_flat(x.device(), ct, in.raw_data(), out.raw_data(), in.numel(), rate, seed, offset);
  return dense(out, x.dtype());
}

// Note [Half-precision attention a few samples at a time]
// The fused attention (Note [Fused causal attention] in core/cpu/fused_attention.cpp) computes in
// f32. For f16 / bf16 activations, converting qkv, dy and dqkv whole made 7 MiB of f32 copies in
// each GPT-mini attention backward, the highest point of a checkpointed f16 step's memory
// (docs/zero.md). Samples are independent, so the kernels run on a few samples at a time (about
// kAttentionChunkBytes of f32 qkv, and as much again for dy and dqkv in the backward; one GPT-mini
// sample, unless the pool has more threads than heads), each chunk's operands converted on the way
// in and its dqkv rounded on the way out; first_sample keeps dropout's numbers the whole batch's. The
// arithmetic of every head is unchanged. f32 activations run in one call, as they need no copies.
// What stays whole: the f32 y and lse the backward reads (B n C + B H n floats).
constexpr int64_t kAttentionChunkBytes = 256 * 1024;

// Samples per call of the fused kernels: all of them when qkv is already f32; else enough for every
// pool thread to have a head (the kernels split heads over the threads).
int64_t attention_chunk_samples(const Tensor& qkv, DType ct, int64_t n_head) {
  const int64_t B = qkv.size(0);
  if (qkv.dtype() == ct || B == 0) return std::max<int64_t>(B, 1);
  const int64_t sample_bytes = qkv.size(1) * qkv.size(2) * static_cast<int64_t>(dtype_size(ct));
  const int64_t for_threads = (num_threads() + n_head - 1) / n_head;
  return std::clamp<int64_t>(std::max(kAttentionChunkBytes / std::max<int64_t>(1, sample_bytes), for_threads), 1, B);
}

AttentionOutput causal_self_attention(const Tensor& qkv, int64_t n_head, double dropout, uint64_t seed,
                                      uint64_t offset) {
  RG_CHECK(qkv.defined() && is_floating(qkv.dtype()) && qkv.dim() == 3 && n_head > 0 && qkv.size(2) % (3 * n_head) == 0,
           "causal_self_attention",
           "qkv must be a floating-point (B, T, 3C) tensor with C divisible by n_head = ", n_head, ", got ",
           qkv.defined() ? qkv.desc() : std::string("undefined"));
  RG_CHECK(dropout >= 0 && dropout < 1, "causal_self_attention", "dropout must be in [0, 1), got ", dropout);
  const DType ct = compute_dtype(qkv.dtype());
  const int64_t B = qkv.size(0), n = qkv.size(1), C = qkv.size(2) / 3;
  profiler::OpScope op("causal_self_attention", attention_flops(B, n, C));
  const AttentionDropout drop{dropout, seed, offset};
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / n_head));
  AttentionOutput out;
  out.y = empty({B, n, C}, ct, qkv.device());
  if (fusion_enabled() && backend_has_fused_attention(qkv.device(), ct, C / n_head)) {
    out.lse = empty({B, n_head, n}, ct, qkv.device());
    const int64_t chunk =
        attention_chunk_samples(qkv, ct, n_head);  // Note [Half-precision attention a few samples ...]
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t count = std::min(chunk, B - b0);
      const Tensor x = dense(slice(qkv, 0, b0, b0 + count, 1), ct);  // (count, n, 3C)
      backend_fused_attention_forward(qkv.device(), x.data<float>(), out.y.data<float>() + b0 * n * C,
                                      out.lse.data<float>() + b0 * n_head * n, count, n, C, n_head, scale, drop, b0);
    }
    out.y_compute = out.y;
  } else {
    const Tensor x = dense(qkv, ct);
    out.att = empty({B, n_head, n, n}, ct, qkv.device());
    backend_attention_forward(qkv.device(), ct, x.raw_data(), out.y.raw_data(), out.att.raw_data(), B, n, C, n_head,
                              scale, drop);
  }
  out.y = dense(out.y, qkv.dtype());
  return out;
}

Tensor causal_self_attention_backward(const Tensor& dy, const Tensor& qkv, const AttentionOutput& saved, int64_t n_head,
                                      double dropout, uint64_t seed, uint64_t offset) {
  const bool fused = saved.lse.defined();
  RG_CHECK(fused ? saved.y_compute.defined() : saved.att.defined(), "causal_self_attention_backward",
           "the forward's saved tensors are missing (", fused ? "y" : "the probabilities", ")");
  const DType ct = fused ? saved.lse.dtype() : saved.att.dtype();
  const AttentionDropout drop{dropout, seed, offset};
  const int64_t B = qkv.size(0), n = qkv.size(1), C = qkv.size(2) / 3;
  profiler::OpScope op("causal_self_attention_backward", 2 * attention_flops(B, n, C));
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / n_head));
  if (fused) {  // a few samples at a time: Note [Half-precision attention a few samples at a time]
    Tensor dqkv = empty(qkv.shape(), qkv.dtype(), qkv.device());
    const int64_t chunk = attention_chunk_samples(qkv, ct, n_head);
    const bool converts = qkv.dtype() != ct;
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t count = std::min(chunk, B - b0);
      const Tensor g = dense(slice(dy, 0, b0, b0 + count, 1), ct), x = dense(slice(qkv, 0, b0, b0 + count, 1), ct);
      const Tensor dqkv_part = slice(dqkv, 0, b0, b0 + count, 1);  // (count, n, 3C)
      const Tensor dx = converts ? empty(dqkv_part.shape(), ct, qkv.device()) : dqkv_part;
      backend_fused_attention_backward(qkv.device(), g.data<float>(), x.data<float>(),
                                       saved.y_compute.data<float>() + b0 * n * C,
                                       saved.lse.data<float>() + b0 * n_head * n, dx.data<float>(), count, n, C, n_head,
                                       scale, drop, b0);
      if (converts) copy_(dqkv_part, dx);
    }
    return dqkv;
  }
  const Tensor g = dense(dy, ct), x = dense(qkv, ct);
  Tensor dqkv = empty(qkv.shape(), ct, qkv.device());
  backend_attention_backward(qkv.device(), ct, g.raw_data(), x.raw_data(), saved.att.raw_data(), dqkv.raw_data(), B, n,
                             C, n_head, scale, drop);
  return dense(dqkv, qkv.dtype());
}

}  // namespace ringgrad::native
