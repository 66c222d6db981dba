// Causal self-attention on the CPU, straight from the packed projection: per head, GEMMs over causal
// row blocks and the row pieces of core/cpu/rows.h. The CUDA version (core/cuda/attention.cu) batches
// the heads of an item into strided-batched GEMMs instead; the front end
// (core/native/transformer.cpp) hands both the same dense tensors in the same compute dtype.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/cpu/dispatch.h"
#include "core/cpu/rows.h"
#include "core/cpu_isa.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ringgrad::cpu {
namespace {

// Note [Attention without head copies]
// c_attn produces qkv: (B, T, 3C), each row [q | k | v], and head h of q is the D = C / H columns
// h D .. h D + D of the q part. That is already a (T, D) matrix for the BLAS: pointer qkv + b T 3C +
// h D, leading dimension 3C. So each head's products read q, k, v where they lie, and write y's head
// straight into its columns of (B, T, C) (leading dimension C) -- no split, no (B, H, T, D)
// transposed copies, and none of their copies back in the backward (they were ~10% of a GPT-mini
// step). One GEMM per head is small (T x T x D); the heads are spread over the compute threads, each
// calling the (single-threaded) BLAS; nested in that parallel_for, cpu::gemm does not split again.
//
// Causal blocks: query i sees keys 0..i only, so half of q k^T (and of p v, and of the backward's
// products) would multiply masked zeros. Queries go in row blocks of kAttentionBlock: block [i0, i0 +
// rows) needs keys [0, i0 + rows) only, so its GEMMs stop there (5/8 of the full products at T = 128).
// Entries right of a row block's keys are never written nor read; the diagonal block's upper
// triangle is written as zeros because the GEMMs read it.
constexpr int64_t kAttentionBlock = 32;

// Note [Softmax rows sixteen lanes wide]
// The causal softmax of a row block (an exp_of per entry) and its backward were the attention's
// own cost beside its GEMMs, 9% of a W3 step in AVX2. With AVX-512 selected, f32 row blocks run
// through the same row functions compiled a second time for AVX-512F (flattened into the clone, so
// that nothing of them stays AVX2): the same operations in the same order on each entry, sums and
// maxima included (Note [Sums in lanes] fixes their order in the code), so the same bits.
template <class T>
void softmax_rows(T* p, int64_t i0, int64_t keys, int64_t n, T scale) {
  for (int64_t i = i0; i < keys; ++i) causal_softmax_row(p + i * n, p + i * n, i, keys, scale);
}

template <class T>
void softmax_backward_rows(T* ds, const T* p, int64_t i0, int64_t keys, int64_t n, T scale) {
  for (int64_t i = i0; i < keys; ++i) causal_softmax_backward_row(ds + i * n, p + i * n, ds + i * n, i, keys, scale);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"), flatten)) void softmax_rows_avx512(float* p, int64_t i0, int64_t keys, int64_t n,
                                                                     float scale) {
  softmax_rows(p, i0, keys, n, scale);
}

__attribute__((target("avx512f"), flatten)) void softmax_backward_rows_avx512(float* ds, const float* p, int64_t i0,
                                                                              int64_t keys, int64_t n, float scale) {
  softmax_backward_rows(ds, p, i0, keys, n, scale);
}
#endif

template <class T>
void causal_softmax_block(T* p, int64_t i0, int64_t keys, int64_t n, T scale) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == CpuIsa::avx512) return softmax_rows_avx512(p, i0, keys, n, scale);
  }
#endif
  softmax_rows(p, i0, keys, n, scale);
}

template <class T>
void causal_softmax_backward_block(T* ds, const T* p, int64_t i0, int64_t keys, int64_t n, T scale) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == CpuIsa::avx512) return softmax_backward_rows_avx512(ds, p, i0, keys, n, scale);
  }
#endif
  softmax_backward_rows(ds, p, i0, keys, n, scale);
}

template <class T>
void attention_heads_forward(const T* qkv, T* y, T* att, int64_t B, int64_t n, int64_t C, int64_t H, double scale,
                             const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C;
  const DType dt = dtype_of<T>();
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> dropped(drop.rate > 0 ? static_cast<size_t>(kAttentionBlock * n) : 0);  // a row block of p'
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / H, h = item % H;
      const T* q = qkv + b * n * ld + h * D;  // (n, D), ld 3C
      const T* k = q + C;
      const T* v = q + 2 * C;
      T* p = att + item * n * n;  // (n, n)
      for (int64_t i0 = 0; i0 < n; i0 += kAttentionBlock) {
        const int64_t rows = std::min(kAttentionBlock, n - i0), keys = i0 + rows;
        T* pb = p + i0 * n;
        gemm(dt, false, true, rows, keys, D, 1.0, q + i0 * ld, ld, k, ld, 0.0, pb, n);  // q k^T
        causal_softmax_block(p, i0, keys, n, static_cast<T>(scale));
        const T* weights = pb;  // what multiplies v: p, or p with dropout (p itself is kept for the backward)
        if (drop.rate > 0) {
          for (int64_t i = i0; i < keys; ++i)
            apply_dropout(p + i * n, dropped.data() + (i - i0) * n, keys, static_cast<uint64_t>((item * n + i) * n),
                          drop);
          weights = dropped.data();
        }
        gemm(dt, false, false, rows, D, keys, 1.0, weights, n, v, ld, 0.0, y + (b * n + i0) * C + h * D, C);
      }
    }
  });
}

// dy: (B, T, C); att: the saved probabilities; writes every column of dqkv: (B, T, 3C).
//   dp = g v^T, ds = softmax backward (row blocks, as the forward);  dq = ds k;
//   dv = p^T g, dk = ds^T q (column blocks: key block [j0, j0 + cols) gets gradient from queries j0..).
template <class T>
void attention_heads_backward(const T* dy, const T* qkv, const T* att, T* dqkv, int64_t B, int64_t n, int64_t C,
                              int64_t H, double scale, const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C;
  const DType dt = dtype_of<T>();
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> scratch(static_cast<size_t>(n * n));                      // this thread's (n, n) ds
    std::vector<T> dropped(drop.rate > 0 ? static_cast<size_t>(n * n) : 0);  // p' = p with dropout
    T* ds = scratch.data();
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / H, h = item % H;
      const T* q = qkv + b * n * ld + h * D;
      const T* k = q + C;
      const T* v = q + 2 * C;
      const T* p = att + item * n * n;
      const T* g = dy + b * n * C + h * D;  // (n, D), ld C
      T* dq = dqkv + b * n * ld + h * D;
      T* dk = dq + C;
      T* dv = dq + 2 * C;
      for (int64_t i0 = 0; i0 < n; i0 += kAttentionBlock) {
        const int64_t rows = std::min(kAttentionBlock, n - i0), keys = i0 + rows;
        gemm(dt, false, true, rows, keys, D, 1.0, g + i0 * C, C, v, ld, 0.0, ds + i0 * n, n);  // dp'
        for (int64_t i = i0; drop.rate > 0 && i < keys; ++i) {  // dp = dp' * keep / (1 - rate); p' for dv below
          const uint64_t e0 = static_cast<uint64_t>((item * n + i) * n);
          apply_dropout(ds + i * n, ds + i * n, keys, e0, drop);
          apply_dropout(p + i * n, dropped.data() + i * n, keys, e0, drop);
        }
        causal_softmax_backward_block(ds, p, i0, keys, n, static_cast<T>(scale));
        gemm(dt, false, false, rows, D, keys, 1.0, ds + i0 * n, n, k, ld, 0.0, dq + i0 * ld, ld);
      }
      for (int64_t j0 = 0; j0 < n; j0 += kAttentionBlock) {
        const int64_t cols = std::min(kAttentionBlock, n - j0), queries = n - j0;
        const T* weights = drop.rate > 0 ? dropped.data() : p;  // dv = p'^T g
        gemm(dt, true, false, cols, D, queries, 1.0, weights + j0 * n + j0, n, g + j0 * C, C, 0.0, dv + j0 * ld, ld);
        gemm(dt, true, false, cols, D, queries, 1.0, ds + j0 * n + j0, n, q + j0 * ld, ld, 0.0, dk + j0 * ld, ld);
      }
    }
  });
}

}  // namespace

void attention_forward(DType dtype, const void* qkv, void* y, void* att, int64_t B, int64_t n, int64_t C, int64_t H,
                       double scale, const AttentionDropout& drop) {
  dispatch_compute("causal_self_attention", dtype, [&](auto tag) {
    using T = decltype(tag);
    attention_heads_forward(static_cast<const T*>(qkv), static_cast<T*>(y), static_cast<T*>(att), B, n, C, H, scale,
                            drop);
  });
}

void attention_backward(DType dtype, const void* dy, const void* qkv, const void* att, void* dqkv, int64_t B, int64_t n,
                        int64_t C, int64_t H, double scale, const AttentionDropout& drop) {
  dispatch_compute("causal_self_attention_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    attention_heads_backward(static_cast<const T*>(dy), static_cast<const T*>(qkv), static_cast<const T*>(att),
                             static_cast<T*>(dqkv), B, n, C, H, scale, drop);
  });
}

}  // namespace ringgrad::cpu
