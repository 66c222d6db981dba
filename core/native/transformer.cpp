// The fused kernels a transformer block needs: layer_norm (forward and backward in one pass over each
// row) and the causal scale-mask-softmax of attention (and its backward). CPU kernels over dense
// rows; f16 / bf16 compute in f32 and round once, f64 stays f64.
//
// Why fused: written with elementwise ops, layer_norm is ~8 passes over x (mean, subtract, square,
// mean, add eps, rsqrt, multiply, affine) and its backward more; each row here is read twice and
// written once. The causal softmax replaces scale, mask-fill and softmax -- three (T, T) temporaries
// per head -- with one pass that never touches the masked upper triangle's inputs.
#include <cmath>
#include <limits>

#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/parallel.h"

namespace ringgrad::native {
namespace {

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// x: (rows, C) dense. Writes y, and per row mean and rstd = 1 / sqrt(var + eps) (biased variance).
template <class T>
void layer_norm_rows(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t C,
                     double eps) {
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * C;
      T* yr = y + r * C;
      T sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += xr[c];
      const T m = sum / static_cast<T>(C);
      T sq = 0;
      for (int64_t c = 0; c < C; ++c) sq += (xr[c] - m) * (xr[c] - m);
      const T rs = T(1) / std::sqrt(sq / static_cast<T>(C) + static_cast<T>(eps));
      for (int64_t c = 0; c < C; ++c) {
        const T xhat = (xr[c] - m) * rs;
        yr[c] = (w ? xhat * w[c] : xhat) + (b ? b[c] : T(0));
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
        T mean_d = 0, mean_dx = 0;
        for (int64_t c = 0; c < C; ++c) {
          const T d = w ? gr[c] * w[c] : gr[c];
          mean_d += d;
          mean_dx += d * (xr[c] - mean[r]) * rstd[r];
        }
        mean_d /= static_cast<T>(C);
        mean_dx /= static_cast<T>(C);
        for (int64_t c = 0; c < C; ++c) {
          const T d = w ? gr[c] * w[c] : gr[c];
          const T xhat = (xr[c] - mean[r]) * rstd[r];
          dxr[c] = rstd[r] * (d - mean_d - xhat * mean_dx);
        }
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
      for (int64_t c = 0; c < C; ++c) {
        if (dw) dw[c] += gr[c] * (xr[c] - mean[r]) * rstd[r];
        if (db) db[c] += gr[c];
      }
    }
  }
}

// s: (mats, T, T) dense. Row i of each matrix: y[j] = softmax_j<=i(scale s[j]), y[j > i] = 0.
template <class T>
void causal_softmax_rows(const T* s, T* y, int64_t mats, int64_t n, double scale) {
  const T k = static_cast<T>(scale);
  parallel_for(mats * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t i = row % n;  // the query position: keys 0..i are visible
      const T* sr = s + row * n;
      T* yr = y + row * n;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j <= i; ++j) max = std::max(max, k * sr[j]);
      T sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        yr[j] = std::exp(k * sr[j] - max);
        sum += yr[j];
      }
      const T inv = T(1) / sum;
      for (int64_t j = 0; j <= i; ++j) yr[j] *= inv;
      for (int64_t j = i + 1; j < n; ++j) yr[j] = 0;
    }
  });
}

// ds[j] = scale y[j] (g[j] - sum_k g[k] y[k]); masked entries have y = 0, so ds = 0 there.
template <class T>
void causal_softmax_backward_rows(const T* g, const T* y, T* ds, int64_t mats, int64_t n, double scale) {
  const T k = static_cast<T>(scale);
  parallel_for(mats * n, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t i = row % n;
      const T* gr = g + row * n;
      const T* yr = y + row * n;
      T* dr = ds + row * n;
      T dot = 0;
      for (int64_t j = 0; j <= i; ++j) dot += gr[j] * yr[j];
      for (int64_t j = 0; j <= i; ++j) dr[j] = k * yr[j] * (gr[j] - dot);
      for (int64_t j = i + 1; j < n; ++j) dr[j] = 0;
    }
  });
}

// t as a dense tensor of dtype dt: t itself when it already is one, else a copy (cast copies).
Tensor dense(const Tensor& t, DType dt) { return t.dtype() == dt ? contiguous(t) : cast(t, dt); }

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

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
  require_cpu("layer_norm", x.device());
  const DType ct = compute_dtype(x.dtype());
  Tensor xd = dense(x, ct);
  Tensor w = weight.defined() ? dense(weight, ct) : Tensor(), b = bias.defined() ? dense(bias, ct) : Tensor();
  const int64_t rows = C ? x.numel() / C : 0;
  Tensor y = empty(x.shape(), ct, x.device());
  LayerNormOutput out{Tensor(), empty({rows}, ct, x.device()), empty({rows}, ct, x.device())};
  if (ct == DType::f64)
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
  if (ct == DType::f64)
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
  require_cpu("causal_softmax", scores.device());
  const DType ct = compute_dtype(scores.dtype());
  Tensor s = dense(scores, ct);
  Tensor y = empty(scores.shape(), ct, scores.device());
  const int64_t n = scores.size(-1), mats = n ? scores.numel() / (n * n) : 0;
  if (ct == DType::f64) causal_softmax_rows(s.data<double>(), y.data<double>(), mats, n, scale);
  else causal_softmax_rows(s.data<float>(), y.data<float>(), mats, n, scale);
  return dense(y, scores.dtype());
}

Tensor causal_softmax_backward(const Tensor& g, const Tensor& y, double scale) {
  const DType ct = compute_dtype(y.dtype());
  Tensor gd = dense(g, ct), yd = dense(y, ct);
  Tensor ds = empty(y.shape(), ct, y.device());
  const int64_t n = y.size(-1), mats = n ? y.numel() / (n * n) : 0;
  if (ct == DType::f64) causal_softmax_backward_rows(gd.data<double>(), yd.data<double>(), ds.data<double>(), mats, n, scale);
  else causal_softmax_backward_rows(gd.data<float>(), yd.data<float>(), ds.data<float>(), mats, n, scale);
  return dense(ds, y.dtype());
}

}  // namespace ringgrad::native
