// Causal self-attention on CUDA: cuBLAS products over all heads of a batch item at once
// (strided-batched GEMMs) plus the row kernels of core/cuda/rows.cu. The CPU version
// (core/cpu/attention.cpp) walks heads and causal row blocks instead; the front end
// (core/native/transformer.cpp) hands both the same dense tensors in the same compute dtype.
//
// Temporaries -- the (B, H, T, T) dropped probabilities and score gradients -- are allocated here,
// from the device's caching allocator (the one the front end's tensors come from, so memory use is
// what it was when the front end allocated them), rather than passed in: they belong to this
// algorithm (the CPU one needs only a row block per thread), and the kernel interface stays the
// same for both backends.
#include <cstdint>
#include <optional>

#include "core/cuda/device.h"
#include "core/cuda/gemm.h"
#include "core/cuda/launch.h"
#include "core/kernels.h"

namespace ringgrad::cuda {

using namespace detail;

// Head h of batch item b is the (T, D) matrix at qkv + b T 3C + h D with row stride 3C (Note
// [Attention without head copies], core/cpu/attention.cpp); the H heads of one item are H matrices D
// elements apart, which is exactly a strided-batched GEMM. att: (B, H, T, T), all of it written (zeros
// above the diagonal).
//   s = q k^T;  att = causal_softmax(scale s);  y = att' v  (att' = att with dropout, else att)
void attention_forward(DType dtype, const void* qkv, void* y, void* att, int64_t B, int64_t n, int64_t C, int64_t H,
                       double scale, const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C, esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t count = B * H * n * n;
  if (count == 0) return;  // B or T is 0: y is empty too
  const char* x = static_cast<const char*>(qkv);
  char* p = static_cast<char*>(att);
  char* yp = static_cast<char*>(y);
  for (int64_t b = 0; b < B; ++b) {
    const char* q = x + b * n * ld * esize;
    gemm_strided_batched(dtype, false, true, n, n, D, 1.0, q, ld, D, q + C * esize, ld, D, 0.0,
                         p + b * H * n * n * esize, n, n * n, H);
  }
  causal_softmax_rows(dtype, att, att, B * H, n, scale);
  std::optional<Scratch> dropped;
  if (drop.rate > 0) {
    dropped.emplace(allocator(device_of(att)), static_cast<size_t>(count * esize));
    dropout_flat(dtype, att, dropped->as<void>(), count, drop.rate, drop.seed, drop.offset);
  }
  const char* weights = dropped ? dropped->as<const char>() : p;
  for (int64_t b = 0; b < B; ++b) {
    const char* v = x + (b * n * ld + 2 * C) * esize;
    gemm_strided_batched(dtype, false, false, n, D, n, 1.0, weights + b * H * n * n * esize, n, n * n, v, ld, D, 0.0,
                         yp + b * n * C * esize, C, D, H);
  }
}

// dp' = g v^T;  dp = dp' with the dropout mask;  ds = causal_softmax_backward(dp, att);
// dq = ds k;  dk = ds^T q;  dv = att'^T g.
void attention_backward(DType dtype, const void* dy, const void* qkv, const void* att, void* dqkv, int64_t B, int64_t n,
                        int64_t C, int64_t H, double scale, const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C, esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t count = B * H * n * n;
  if (count == 0) return;  // B or T is 0: dqkv is empty too
  const char* x = static_cast<const char*>(qkv);
  const char* g = static_cast<const char*>(dy);
  char* dx = static_cast<char*>(dqkv);
  Allocator& memory = allocator(device_of(dqkv));
  Scratch ds(memory, static_cast<size_t>(count * esize));  // (B, H, T, T)
  char* dsp = ds.as<char>();
  for (int64_t b = 0; b < B; ++b) {
    const char* v = x + (b * n * ld + 2 * C) * esize;
    gemm_strided_batched(dtype, false, true, n, n, D, 1.0, g + b * n * C * esize, C, D, v, ld, D, 0.0,
                         dsp + b * H * n * n * esize, n, n * n, H);
  }
  std::optional<Scratch> dropped;
  if (drop.rate > 0) {
    dropped.emplace(memory, static_cast<size_t>(count * esize));
    dropout_flat(dtype, dsp, dsp, count, drop.rate, drop.seed, drop.offset);
    dropout_flat(dtype, att, dropped->as<void>(), count, drop.rate, drop.seed, drop.offset);
  }
  causal_softmax_backward_rows(dtype, dsp, att, dsp, B * H, n, scale);
  const char* weights = dropped ? dropped->as<const char>() : static_cast<const char*>(att);
  for (int64_t b = 0; b < B; ++b) {
    const char* q = x + b * n * ld * esize;
    const char* k = q + C * esize;
    char* dq = dx + b * n * ld * esize;
    const char* dsb = dsp + b * H * n * n * esize;
    gemm_strided_batched(dtype, false, false, n, D, n, 1.0, dsb, n, n * n, k, ld, D, 0.0, dq, ld, D, H);
    gemm_strided_batched(dtype, true, false, n, D, n, 1.0, dsb, n, n * n, q, ld, D, 0.0, dq + C * esize, ld, D, H);
    gemm_strided_batched(dtype, true, false, n, D, n, 1.0, weights + b * H * n * n * esize, n, n * n,
                         g + b * n * C * esize, C, D, 0.0, dq + 2 * C * esize, ld, D, H);
  }
}

}  // namespace ringgrad::cuda
