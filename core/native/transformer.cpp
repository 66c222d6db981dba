// The fused kernels a transformer block needs: layer_norm (forward and backward in one pass over each
// row) and the causal scale-mask-softmax of attention (and its backward). CPU kernels over dense
// rows; f16 / bf16 compute in f32 and round once, f64 stays f64.
//
// Why fused: written with elementwise ops, layer_norm is ~8 passes over x (mean, subtract, square,
// mean, add eps, rsqrt, multiply, affine) and its backward more; each row here is read twice and
// written once. The causal softmax replaces scale, mask-fill and softmax -- three (T, T) temporaries
// per head -- with one pass that never touches the masked upper triangle's inputs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/parallel.h"
#include "core/random.h"

namespace ringgrad::native {
namespace {

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// Note [Sums in lanes]: a floating-point sum kept in one accumulator is a dependency chain that GCC
// may not reorder (no -ffast-math), so it runs unvectorised at one add per add-latency. Eight
// partial sums (maxima), combined in a fixed order at the end, vectorise. The result may differ from
// the serial sum in the last bits, the same on every call.
constexpr int kLanes = 8;

template <class T, class Term>
T sum_lanes(int64_t n, Term term) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  T total = 0;
  for (; i < n; ++i) total += term(i);
  for (int l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

template <class T, class Term>
T max_lanes(int64_t n, Term term) {
  T acc[kLanes];
  for (T& a : acc) a = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], term(i + l));
  T best = -std::numeric_limits<T>::infinity();
  for (; i < n; ++i) best = std::max(best, term(i));
  for (int l = 0; l < kLanes; ++l) best = std::max(best, acc[l]);
  return best;
}

// x: (rows, C) dense. Writes y, and per row mean and rstd = 1 / sqrt(var + eps) (biased variance).
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t C,
                     double eps) {
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      // Note [Sums in lanes]
      const T m = sum_lanes<T>(C, [&](int64_t c) { return xr[c]; }) / static_cast<T>(C);
      const T sq = sum_lanes<T>(C, [&](int64_t c) { return (xr[c] - m) * (xr[c] - m); });
      const T rs = T(1) / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(eps));
      if (w != nullptr && b != nullptr) {
        for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
      } else {
        for (int64_t c = 0; c < C; ++c) {
          const T xhat = (xr[c] - m) * rs;
          yr[c] = (w ? xhat * w[c] : xhat) + (b ? b[c] : T(0));
        }
      }
      mean[r] = m;
      rstd[r] = rs;
    }
  });
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g w;  dw = sum_rows g xhat;
// db = sum_rows g. dw / db are summed over rows serially (C columns, no races).
template <class T>
void layer_norm_backward_rows(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                              int64_t rows, int64_t C) {
  if (dx) {
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* gr = g + r * C;
        const T* xr = x + r * C;
        T* dxr = dx + r * C;
        const T m = mean[r], rs = rstd[r];  // locals: a store to dxr cannot change them
        // The same loops with and without a weight, so that neither tests w per element.
        auto row = [&](auto d) {
          // Note [Sums in lanes]
          const T mean_d = sum_lanes<T>(C, d) / static_cast<T>(C);
          const T mean_dx = sum_lanes<T>(C, [&](int64_t c) { return d(c) * (xr[c] - m) * rs; }) / static_cast<T>(C);
          for (int64_t c = 0; c < C; ++c) dxr[c] = rs * (d(c) - mean_d - (xr[c] - m) * rs * mean_dx);
        };
        if (w != nullptr) row([&](int64_t c) { return gr[c] * w[c]; });
        else row([&](int64_t c) { return gr[c]; });
      }
    });
  }
  if (dw || db) {
    for (int64_t c = 0; c < C; ++c) {
      if (dw) dw[c] = 0;
      if (db) db[c] = 0;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * C;
      const T* xr = x + r * C;
      const T m = mean[r], rs = rstd[r];
      if (dw)
        for (int64_t c = 0; c < C; ++c) dw[c] += gr[c] * (xr[c] - m) * rs;
      if (db)
        for (int64_t c = 0; c < C; ++c) db[c] += gr[c];
    }
  }
}

// One row of a causal softmax: query position i sees keys 0..i. y[j] = softmax_j<=i(k s[j]), y[j > i]
// = 0. y may be s (in place).
template <class T>
void causal_softmax_row(const T* s, T* y, int64_t i, int64_t n, T k) {
  // Note [Sums in lanes] for the max and the sum; the exponentials vectorise as they are.
  const T max = max_lanes<T>(i + 1, [&](int64_t j) { return k * s[j]; });
  for (int64_t j = 0; j <= i; ++j) y[j] = exp_of(k * s[j] - max);
  const T inv = T(1) / sum_lanes<T>(i + 1, [&](int64_t j) { return y[j]; });
  for (int64_t j = 0; j <= i; ++j) y[j] *= inv;
  for (int64_t j = i + 1; j < n; ++j) y[j] = 0;
}

// Its backward: ds[j] = k y[j] (g[j] - sum_l g[l] y[l]); masked entries have y = 0, so ds = 0 there.
// ds may be g (in place).
template <class T>
void causal_softmax_backward_row(const T* g, const T* y, T* ds, int64_t i, int64_t n, T k) {
  const T dot = sum_lanes<T>(i + 1, [&](int64_t j) { return g[j] * y[j]; });  // Note [Sums in lanes]
  for (int64_t j = 0; j <= i; ++j) ds[j] = k * y[j] * (g[j] - dot);
  for (int64_t j = i + 1; j < n; ++j) ds[j] = 0;
}

// s: (mats, T, T) dense; every row of every matrix.
template <class T>
void causal_softmax_rows(const T* s, T* y, int64_t mats, int64_t n, double scale) {
  parallel_for(mats * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      causal_softmax_row(s + row * n, y + row * n, row % n, n, static_cast<T>(scale));
  });
}

template <class T>
void causal_softmax_backward_rows(const T* g, const T* y, T* ds, int64_t mats, int64_t n, double scale) {
  parallel_for(mats * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      causal_softmax_backward_row(g + row * n, y + row * n, ds + row * n, row % n, n, static_cast<T>(scale));
  });
}

// ---- attention straight from the packed projection ----
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

// Attention dropout (GPT-2's attn_pdrop): y = (p * keep / (1 - rate)) v. The mask is not stored: the
// keep bit of probability (item, i, j) is a Philox draw at element e = (item n + i) n + j (counter
// offset + e / 4, word e % 4, key seed -- core/random.h), so the backward recomputes it exactly.
struct AttentionDropout {
  double rate = 0;  // 0: none
  uint64_t seed = 0, offset = 0;
};

// out[j] = row[j] * keep(e0 + j) / (1 - rate) for j < count; row may be out.
template <class T>
void apply_dropout(const T* row, T* out, int64_t count, uint64_t e0, const AttentionDropout& d) {
  const T scale = static_cast<T>(1.0 / (1.0 - d.rate));
  const float rate = static_cast<float>(d.rate);
  uint64_t counter = ~uint64_t(0);
  Philox4x32 words{};
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t e = e0 + static_cast<uint64_t>(j);
    if (d.offset + e / 4 != counter) counter = d.offset + e / 4, words = philox4x32(counter, 0, d.seed);
    out[j] = uint_to_unit_float(words.v[e % 4]) >= rate ? row[j] * scale : T(0);
  }
}

template <class T>
void attention_heads_forward(const T* qkv, T* y, T* att, int64_t B, int64_t n, int64_t C, int64_t H, double scale,
                             const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C;
  const DType dt = dtype_of<T>();
  const Device cpu = Device::cpu();
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
        backend_gemm(cpu, dt, false, true, rows, keys, D, 1.0, q + i0 * ld, ld, k, ld, 0.0, pb, n);  // q k^T
        for (int64_t i = i0; i < keys; ++i) causal_softmax_row(p + i * n, p + i * n, i, keys, static_cast<T>(scale));
        const T* weights = pb;  // what multiplies v: p, or p with dropout (p itself is kept for the backward)
        if (drop.rate > 0) {
          for (int64_t i = i0; i < keys; ++i)
            apply_dropout(p + i * n, dropped.data() + (i - i0) * n, keys, static_cast<uint64_t>((item * n + i) * n), drop);
          weights = dropped.data();
        }
        backend_gemm(cpu, dt, false, false, rows, D, keys, 1.0, weights, n, v, ld, 0.0, y + (b * n + i0) * C + h * D, C);
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
  const Device cpu = Device::cpu();
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> scratch(static_cast<size_t>(n * n));  // this thread's (n, n) ds
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
        backend_gemm(cpu, dt, false, true, rows, keys, D, 1.0, g + i0 * C, C, v, ld, 0.0, ds + i0 * n, n);  // dp'
        for (int64_t i = i0; i < keys; ++i) {
          if (drop.rate > 0) {  // dp = dp' * keep / (1 - rate); p' for dv below
            const uint64_t e0 = static_cast<uint64_t>((item * n + i) * n);
            apply_dropout(ds + i * n, ds + i * n, keys, e0, drop);
            apply_dropout(p + i * n, dropped.data() + i * n, keys, e0, drop);
          }
          causal_softmax_backward_row(ds + i * n, p + i * n, ds + i * n, i, keys, static_cast<T>(scale));
        }
        backend_gemm(cpu, dt, false, false, rows, D, keys, 1.0, ds + i0 * n, n, k, ld, 0.0, dq + i0 * ld, ld);
      }
      for (int64_t j0 = 0; j0 < n; j0 += kAttentionBlock) {
        const int64_t cols = std::min(kAttentionBlock, n - j0), queries = n - j0;
        const T* weights = drop.rate > 0 ? dropped.data() : p;  // dv = p'^T g
        backend_gemm(cpu, dt, true, false, cols, D, queries, 1.0, weights + j0 * n + j0, n, g + j0 * C, C, 0.0,
                     dv + j0 * ld, ld);
        backend_gemm(cpu, dt, true, false, cols, D, queries, 1.0, ds + j0 * n + j0, n, q + j0 * ld, ld, 0.0,
                     dk + j0 * ld, ld);
      }
    }
  });
}

// t as a dense tensor of dtype dt: t itself when it already is one, else a copy (cast copies).
Tensor dense(const Tensor& t, DType dt) { return t.dtype() == dt ? contiguous(t) : cast(t, dt); }

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// ---- the CUDA path ---------------------------------------------------------------------------------
// The same kernels on a GPU (core/cuda/rows.cu), and attention as cuBLAS products over all heads of a
// batch item at once plus the row kernels. Tensors are dense, in the compute dtype ct. Without CUDA
// compiled in no tensor can be on a GPU, so these are never reached.
#ifdef RINGGRAD_WITH_CUDA
void cuda_layer_norm(DType ct, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
                     const Tensor& rstd, int64_t rows, int64_t C, double eps) {
  cuda::layer_norm_rows(ct, x.raw_data(), w.defined() ? w.raw_data() : nullptr, b.defined() ? b.raw_data() : nullptr,
                        y.raw_data(), mean.raw_data(), rstd.raw_data(), rows, C, eps);
}
void cuda_layer_norm_backward(DType ct, const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db, int64_t rows,
                              int64_t C) {
  auto ptr = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
  cuda::layer_norm_backward_rows(ct, g.raw_data(), x.raw_data(), ptr(w), mean.raw_data(), rstd.raw_data(), ptr(dx),
                                 ptr(dw), ptr(db), rows, C);
}
void cuda_causal_softmax(DType ct, const Tensor& s, const Tensor& y, int64_t mats, int64_t n, double scale) {
  cuda::causal_softmax_rows(ct, s.raw_data(), y.raw_data(), mats, n, scale);
}
void cuda_causal_softmax_backward(DType ct, const Tensor& g, const Tensor& y, const Tensor& ds, int64_t mats,
                                  int64_t n, double scale) {
  cuda::causal_softmax_backward_rows(ct, g.raw_data(), y.raw_data(), ds.raw_data(), mats, n, scale);
}

// Head h of batch item b is the (T, D) matrix at qkv + b T 3C + h D with row stride 3C (Note
// [Attention without head copies]); the H heads of one item are H matrices D elements apart, which
// is exactly a strided-batched GEMM. att: (B, H, T, T), all of it written (zeros above the diagonal).
//   s = q k^T;  att = causal_softmax(scale s);  y = att' v  (att' = att with dropout, else att)
void cuda_attention_forward(DType ct, const Tensor& qkv, const Tensor& y, const Tensor& att, int64_t B, int64_t n,
                            int64_t C, int64_t H, double scale, const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C, esize = static_cast<int64_t>(dtype_size(ct));
  const char* x = static_cast<const char*>(qkv.raw_data());
  char* p = static_cast<char*>(att.raw_data());
  char* yp = static_cast<char*>(y.raw_data());
  for (int64_t b = 0; b < B; ++b) {
    const char* q = x + b * n * ld * esize;
    cuda::gemm_strided_batched(ct, false, true, n, n, D, 1.0, q, ld, D, q + C * esize, ld, D, 0.0,
                               p + b * H * n * n * esize, n, n * n, H);
  }
  cuda::causal_softmax_rows(ct, att.raw_data(), att.raw_data(), B * H, n, scale);
  Tensor dropped = drop.rate > 0 ? empty(att.shape(), ct, att.device()) : Tensor();
  if (drop.rate > 0)
    cuda::dropout_flat(ct, att.raw_data(), dropped.raw_data(), att.numel(), drop.rate, drop.seed, drop.offset);
  const char* weights = static_cast<const char*>(drop.rate > 0 ? dropped.raw_data() : att.raw_data());
  for (int64_t b = 0; b < B; ++b) {
    const char* v = x + (b * n * ld + 2 * C) * esize;
    cuda::gemm_strided_batched(ct, false, false, n, D, n, 1.0, weights + b * H * n * n * esize, n, n * n, v, ld, D, 0.0,
                               yp + b * n * C * esize, C, D, H);
  }
}

// dp' = g v^T;  dp = dp' with the dropout mask;  ds = causal_softmax_backward(dp, att);
// dq = ds k;  dk = ds^T q;  dv = att'^T g.
void cuda_attention_backward(DType ct, const Tensor& dy, const Tensor& qkv, const Tensor& att, const Tensor& dqkv,
                             int64_t B, int64_t n, int64_t C, int64_t H, double scale, const AttentionDropout& drop) {
  const int64_t D = C / H, ld = 3 * C, esize = static_cast<int64_t>(dtype_size(ct));
  const char* x = static_cast<const char*>(qkv.raw_data());
  const char* g = static_cast<const char*>(dy.raw_data());
  char* dx = static_cast<char*>(dqkv.raw_data());
  Tensor ds = empty(att.shape(), ct, att.device());  // (B, H, T, T)
  char* dsp = static_cast<char*>(ds.raw_data());
  for (int64_t b = 0; b < B; ++b) {
    const char* v = x + (b * n * ld + 2 * C) * esize;
    cuda::gemm_strided_batched(ct, false, true, n, n, D, 1.0, g + b * n * C * esize, C, D, v, ld, D, 0.0,
                               dsp + b * H * n * n * esize, n, n * n, H);
  }
  Tensor dropped = drop.rate > 0 ? empty(att.shape(), ct, att.device()) : Tensor();
  if (drop.rate > 0) {
    cuda::dropout_flat(ct, ds.raw_data(), ds.raw_data(), ds.numel(), drop.rate, drop.seed, drop.offset);
    cuda::dropout_flat(ct, att.raw_data(), dropped.raw_data(), att.numel(), drop.rate, drop.seed, drop.offset);
  }
  cuda::causal_softmax_backward_rows(ct, ds.raw_data(), att.raw_data(), ds.raw_data(), B * H, n, scale);
  const char* weights = static_cast<const char*>(drop.rate > 0 ? dropped.raw_data() : att.raw_data());
  for (int64_t b = 0; b < B; ++b) {
    const char* q = x + b * n * ld * esize;
    const char* k = q + C * esize;
    char* dq = dx + b * n * ld * esize;
    const char* dsb = dsp + b * H * n * n * esize;
    cuda::gemm_strided_batched(ct, false, false, n, D, n, 1.0, dsb, n, n * n, k, ld, D, 0.0, dq, ld, D, H);
    cuda::gemm_strided_batched(ct, true, false, n, D, n, 1.0, dsb, n, n * n, q, ld, D, 0.0, dq + C * esize, ld, D, H);
    cuda::gemm_strided_batched(ct, true, false, n, D, n, 1.0, weights + b * H * n * n * esize, n, n * n,
                               g + b * n * C * esize, C, D, 0.0, dq + 2 * C * esize, ld, D, H);
  }
}
#else
[[noreturn]] void no_cuda() { RG_FAIL("transformer", "a CUDA tensor in a build without CUDA"); }
void cuda_layer_norm(DType, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     int64_t, int64_t, double) { no_cuda(); }
void cuda_layer_norm_backward(DType, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t) { no_cuda(); }
void cuda_causal_softmax(DType, const Tensor&, const Tensor&, int64_t, int64_t, double) { no_cuda(); }
void cuda_causal_softmax_backward(DType, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, double) {
  no_cuda();
}
void cuda_attention_forward(DType, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t,
                            double, const AttentionDropout&) { no_cuda(); }
void cuda_attention_backward(DType, const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                             int64_t, int64_t, double, const AttentionDropout&) { no_cuda(); }
#endif

}  // namespace

LayerNormOutput layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  RG_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() >= 1, "layer_norm",
           "x must be a floating-point tensor (..., C), got ", x.defined() ? x.desc() : std::string("undefined"));
  const int64_t C = x.size(-1);
  for (const Tensor* p : {&weight, &bias})
    RG_CHECK(!p->defined() || (p->dim() == 1 && p->size(0) == C && p->dtype() == x.dtype() &&
                               p->device() == x.device()),
             "layer_norm", "weight and bias must be (", C, ",) ", dtype_name(x.dtype()), " on ", x.device().str(),
             " like x ", x.desc(), ", got ", p->desc());
  RG_CHECK(eps > 0, "layer_norm", "eps must be positive, got ", eps);
  const DType ct = compute_dtype(x.dtype());
  Tensor xd = dense(x, ct);
  Tensor w = weight.defined() ? dense(weight, ct) : Tensor(), b = bias.defined() ? dense(bias, ct) : Tensor();
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor y = empty(x.shape(), ct, x.device());
  LayerNormOutput out{Tensor(), empty({rows}, ct, x.device()), empty({rows}, ct, x.device())};
  if (x.device().is_cuda())
    cuda_layer_norm(ct, xd, w, b, y, out.mean, out.rstd, rows, C, eps);
  else if (ct == DType::f64)
    layer_norm_rows(xd.data<double>(), ptr_or_null<double>(w), ptr_or_null<double>(b), y.data<double>(),
                    out.mean.data<double>(), out.rstd.data<double>(), rows, C, eps);
  else
    layer_norm_rows(xd.data<float>(), ptr_or_null<float>(w), ptr_or_null<float>(b), y.data<float>(),
                    out.mean.data<float>(), out.rstd.data<float>(), rows, C, eps);
  out.y = dense(y, x.dtype());
  return out;
}

void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, Tensor* dx, Tensor* dweight, Tensor* dbias) {
  const DType ct = mean.dtype();
  const int64_t C = x.size(-1), rows = C ? x.numel() / C : 0;
  Tensor gd = dense(g, ct), xd = dense(x, ct), w = weight.defined() ? dense(weight, ct) : Tensor();
  Tensor dxt = dx ? empty(x.shape(), ct, x.device()) : Tensor();
  Tensor dwt = dweight ? empty({C}, ct, x.device()) : Tensor();
  Tensor dbt = dbias ? empty({C}, ct, x.device()) : Tensor();
  if (x.device().is_cuda())
    cuda_layer_norm_backward(ct, gd, xd, w, mean, rstd, dxt, dwt, dbt, rows, C);
  else if (ct == DType::f64)
    layer_norm_backward_rows(gd.data<double>(), xd.data<double>(), ptr_or_null<double>(w), mean.data<double>(),
                             rstd.data<double>(), dx ? dxt.data<double>() : nullptr,
                             dweight ? dwt.data<double>() : nullptr, dbias ? dbt.data<double>() : nullptr, rows, C);
  else
    layer_norm_backward_rows(gd.data<float>(), xd.data<float>(), ptr_or_null<float>(w), mean.data<float>(),
                             rstd.data<float>(), dx ? dxt.data<float>() : nullptr,
                             dweight ? dwt.data<float>() : nullptr, dbias ? dbt.data<float>() : nullptr, rows, C);
  if (dx) *dx = dense(dxt, x.dtype());
  if (dweight) *dweight = dense(dwt, x.dtype());
  if (dbias) *dbias = dense(dbt, x.dtype());
}

Tensor causal_softmax(const Tensor& scores, double scale) {
  RG_CHECK(scores.defined() && is_floating(scores.dtype()) && scores.dim() >= 2 &&
               scores.size(-1) == scores.size(-2),
           "causal_softmax", "scores must be a floating-point (..., T, T) tensor, got ",
           scores.defined() ? scores.desc() : std::string("undefined"));
  const DType ct = compute_dtype(scores.dtype());
  Tensor s = dense(scores, ct);
  Tensor y = empty(scores.shape(), ct, scores.device());
  const int64_t n = scores.size(-1), mats = n ? scores.numel() / (n * n) : 0;
  if (scores.device().is_cuda())
    cuda_causal_softmax(ct, s, y, mats, n, scale);
  else if (ct == DType::f64) causal_softmax_rows(s.data<double>(), y.data<double>(), mats, n, scale);
  else causal_softmax_rows(s.data<float>(), y.data<float>(), mats, n, scale);
  return dense(y, scores.dtype());
}

Tensor causal_softmax_backward(const Tensor& g, const Tensor& y, double scale) {
  const DType ct = compute_dtype(y.dtype());
  Tensor gd = dense(g, ct), yd = dense(y, ct);
  Tensor ds = empty(y.shape(), ct, y.device());
  const int64_t n = y.size(-1), mats = n ? y.numel() / (n * n) : 0;
  if (y.device().is_cuda())
    cuda_causal_softmax_backward(ct, gd, yd, ds, mats, n, scale);
  else if (ct == DType::f64) causal_softmax_backward_rows(gd.data<double>(), yd.data<double>(), ds.data<double>(), mats, n, scale);
  else causal_softmax_backward_rows(gd.data<float>(), yd.data<float>(), ds.data<float>(), mats, n, scale);
  return dense(ds, y.dtype());
}

Tensor dropout(const Tensor& x, double rate, uint64_t seed, uint64_t offset) {
  RG_CHECK(x.defined() && is_floating(x.dtype()), "dropout", "expects a floating-point tensor, got ",
           x.defined() ? x.desc() : std::string("undefined"));
  RG_CHECK(rate >= 0 && rate < 1, "dropout", "rate must be in [0, 1), got ", rate);
  const DType ct = compute_dtype(x.dtype());
  Tensor in = dense(x, ct);
  Tensor out = empty(x.shape(), ct, x.device());
  const AttentionDropout drop{rate, seed, offset};
  const int64_t count = in.numel();
  if (x.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::dropout_flat(ct, in.raw_data(), out.raw_data(), count, rate, seed, offset);
#endif
  } else {
    // Element e's draw depends on e alone, so any split of the range gives the same mask.
    auto run = [&](auto* from, auto* to) {
      parallel_for(count, 16384, [&](int64_t lo, int64_t hi) {
        apply_dropout(from + lo, to + lo, hi - lo, static_cast<uint64_t>(lo), drop);
      });
    };
    if (ct == DType::f64) run(in.data<double>(), out.data<double>());
    else run(in.data<float>(), out.data<float>());
  }
  return dense(out, x.dtype());
}

AttentionOutput causal_self_attention(const Tensor& qkv, int64_t n_head, double dropout, uint64_t seed,
                                      uint64_t offset) {
  RG_CHECK(qkv.defined() && is_floating(qkv.dtype()) && qkv.dim() == 3 && n_head > 0 &&
               qkv.size(2) % (3 * n_head) == 0,
           "causal_self_attention", "qkv must be a floating-point (B, T, 3C) tensor with C divisible by n_head = ",
           n_head, ", got ", qkv.defined() ? qkv.desc() : std::string("undefined"));
  RG_CHECK(dropout >= 0 && dropout < 1, "causal_self_attention", "dropout must be in [0, 1), got ", dropout);
  const DType ct = compute_dtype(qkv.dtype());
  const int64_t B = qkv.size(0), n = qkv.size(1), C = qkv.size(2) / 3;
  const AttentionDropout drop{dropout, seed, offset};
  Tensor x = dense(qkv, ct);
  AttentionOutput out{empty({B, n, C}, ct, qkv.device()), empty({B, n_head, n, n}, ct, qkv.device())};
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / n_head));
  if (qkv.device().is_cuda())
    cuda_attention_forward(ct, x, out.y, out.att, B, n, C, n_head, scale, drop);
  else if (ct == DType::f64)
    attention_heads_forward(x.data<double>(), out.y.data<double>(), out.att.data<double>(), B, n, C, n_head, scale,
                            drop);
  else
    attention_heads_forward(x.data<float>(), out.y.data<float>(), out.att.data<float>(), B, n, C, n_head, scale,
                            drop);
  out.y = dense(out.y, qkv.dtype());
  return out;
}

Tensor causal_self_attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& att, int64_t n_head,
                                      double dropout, uint64_t seed, uint64_t offset) {
  const DType ct = att.dtype();
  const AttentionDropout drop{dropout, seed, offset};
  const int64_t B = qkv.size(0), n = qkv.size(1), C = qkv.size(2) / 3;
  Tensor g = dense(dy, ct), x = dense(qkv, ct);
  Tensor dqkv = empty(qkv.shape(), ct, qkv.device());
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / n_head));
  if (qkv.device().is_cuda())
    cuda_attention_backward(ct, g, x, att, dqkv, B, n, C, n_head, scale, drop);
  else if (ct == DType::f64)
    attention_heads_backward(g.data<double>(), x.data<double>(), att.data<double>(), dqkv.data<double>(), B, n, C,
                             n_head, scale, drop);
  else
    attention_heads_backward(g.data<float>(), x.data<float>(), att.data<float>(), dqkv.data<float>(), B, n, C,
                             n_head, scale, drop);
  return dense(dqkv, qkv.dtype());
}

}  // namespace ringgrad::native
