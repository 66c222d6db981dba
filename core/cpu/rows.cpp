// Row kernels on the CPU: softmax / log_softmax, the two halves of cross-entropy, layer_norm (forward
// and backward in one pass over each row), the causal scale-mask-softmax of attention (and its
// backward) and dropout. The CUDA versions are in core/cuda/rows.cu; the front ends
// (core/native/softmax.cpp, core/native/transformer.cpp) hand both the same dense rows in the same
// compute dtype: f32, or f64 for f64 tensors (f16 / bf16 compute in f32 and round once).
//
// Why fused: written with elementwise ops, layer_norm is ~8 passes over x (mean, subtract, square,
// mean, add eps, rsqrt, multiply, affine) and its backward more; each row here is read twice and
// written once. The causal softmax replaces scale, mask-fill and softmax -- three (T, T) temporaries
// per head -- with one pass that never touches the masked upper triangle's inputs.
//
// Stability: every softmax row is shifted by its maximum before exponentiating, so exp never
// overflows; log_softmax = (x - max) - log(sum(exp(x - max))) never takes the log of a
// rounded-to-zero softmax.
//
// Legend: rows = the product of all but the last dim, cols / C = the last dim, n = T for (T, T)
// attention matrices, mats = how many of them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu/dispatch.h"
#include "core/cpu/rows.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ringgrad::cpu {
namespace {

// ---- softmax / log_softmax: x, y dense (rows, cols) ---------------------------------------------------
template <class T>
void softmax_rows_typed(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t c = 0; c < cols; ++c) max = xr[c] > max ? xr[c] : max;
      if (!std::isfinite(max)) max = 0;  // all -inf (or a NaN/inf row): keep the math defined
      // exp into y first, sum after: a loop without the running sum vectorises (a float sum is a
      // serial dependency the compiler may not reorder).
      for (int64_t c = 0; c < cols; ++c) yr[c] = exp_of(xr[c] - max);
      T sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += yr[c];
      if (log) {
        const T lse = std::log(sum);
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - max - lse;
      } else {
        const T inv = T(1) / sum;
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
      }
    }
  });
}

// ---- cross-entropy: logp, p (n, c); target (n) ---------------------------------------------------------
// p: dense (N, C) softmax, turned in place into (p - onehot(t)) * scale, zero rows where ignored.
template <class T>
void subtract_one_hot_and_scale(T* p, const int64_t* t, int64_t n, int64_t c, int64_t ignore_index, double scale) {
  for (int64_t i = 0; i < n; ++i) {
    T* row = p + i * c;
    if (t[i] == ignore_index) {
      for (int64_t j = 0; j < c; ++j) row[j] = 0;
      continue;
    }
    row[t[i]] -= T(1);
    for (int64_t j = 0; j < c; ++j) row[j] *= static_cast<T>(scale);
  }
}

// ---- layer_norm ---------------------------------------------------------------------------------------
// x: (rows, C) dense. Writes y, and per row mean and rstd = 1 / sqrt(var + eps) (biased variance).
template <class T>
void layer_norm_typed(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t C, double eps) {
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
void layer_norm_backward_typed(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx, T* dw, T* db,
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

// ---- causal softmax: s, y (mats, n, n) dense; every row of every matrix -------------------------------
template <class T>
void causal_softmax_typed(const T* s, T* y, int64_t mats, int64_t n, double scale) {
  parallel_for(mats * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      causal_softmax_row(s + row * n, y + row * n, row % n, n, static_cast<T>(scale));
  });
}

template <class T>
void causal_softmax_backward_typed(const T* g, const T* y, T* ds, int64_t mats, int64_t n, double scale) {
  parallel_for(mats * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      causal_softmax_backward_row(g + row * n, y + row * n, ds + row * n, row % n, n, static_cast<T>(scale));
  });
}

}  // namespace

void softmax_rows(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, bool log) {
  dispatch_compute(log ? "log_softmax" : "softmax", dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_rows_typed(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, log);
  });
}

// Serially, in double: the loss of one batch.
void nll_mean(DType dtype, const void* logp, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
              double* loss, int64_t* count) {
  double total = 0;
  int64_t counted = 0;
  dispatch_compute("cross_entropy", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* lp = static_cast<const T*>(logp);
    for (int64_t i = 0; i < n; ++i) {
      if (target[i] == ignore_index) continue;
      total -= static_cast<double>(lp[i * c + target[i]]);
      ++counted;
    }
  });
  *count = counted;
  *loss = counted ? total / static_cast<double>(counted) : 0.0;
}

void softmax_minus_one_hot(DType dtype, void* p, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
                           const void* grad, const int64_t* count) {
  dispatch_compute("cross_entropy_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    const double scale = *count ? static_cast<double>(*static_cast<const T*>(grad)) / static_cast<double>(*count) : 0.0;
    subtract_one_hot_and_scale(static_cast<T*>(p), target, n, c, ignore_index, scale);
  });
}

void layer_norm_rows(DType dtype, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                     int64_t rows, int64_t C, double eps) {
  dispatch_compute("layer_norm", dtype, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_typed(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y),
                     static_cast<T*>(mean), static_cast<T*>(rstd), rows, C, eps);
  });
}

void layer_norm_backward_rows(DType dtype, const void* g, const void* x, const void* w, const void* mean,
                              const void* rstd, void* dx, void* dw, void* db, int64_t rows, int64_t C) {
  dispatch_compute("layer_norm_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_backward_typed(static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(w),
                              static_cast<const T*>(mean), static_cast<const T*>(rstd), static_cast<T*>(dx),
                              static_cast<T*>(dw), static_cast<T*>(db), rows, C);
  });
}

void causal_softmax_rows(DType dtype, const void* s, void* y, int64_t mats, int64_t n, double scale) {
  dispatch_compute("causal_softmax", dtype, [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_typed(static_cast<const T*>(s), static_cast<T*>(y), mats, n, scale);
  });
}

void causal_softmax_backward_rows(DType dtype, const void* g, const void* y, void* ds, int64_t mats, int64_t n,
                                  double scale) {
  dispatch_compute("causal_softmax_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_backward_typed(static_cast<const T*>(g), static_cast<const T*>(y), static_cast<T*>(ds), mats, n,
                                  scale);
  });
}

void dropout_flat(DType dtype, const void* in, void* out, int64_t count, double rate, uint64_t seed, uint64_t offset) {
  const AttentionDropout drop{rate, seed, offset};
  dispatch_compute("dropout", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* from = static_cast<const T*>(in);
    T* to = static_cast<T*>(out);
    // Element e's draw depends on e alone, so any split of the range gives the same mask.
    parallel_for(count, 16384, [&](int64_t lo, int64_t hi) {
      apply_dropout(from + lo, to + lo, hi - lo, static_cast<uint64_t>(lo), drop);
    });
  });
}

}  // namespace ringgrad::cpu
