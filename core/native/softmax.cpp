// softmax / log_softmax and the fused cross-entropy: CPU kernels over rows here, CUDA kernels in
// core/cuda/rows.cu (chosen below by the tensors' device; both see the same dense rows in the same
// compute dtype).
//
// Stability: every row is shifted by its maximum before exponentiating, so exp never overflows;
// log_softmax = (x - max) - log(sum(exp(x - max))) never takes the log of a rounded-to-zero softmax.
// f16/bf16 inputs are computed in f32 and rounded once.
#include <cmath>
#include <limits>

#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/parallel.h"

namespace ringgrad::native {
namespace {

// x, y: dense (rows, cols), T = float or double.
template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
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

// p: dense (N, C) softmax, turned in place into (p - onehot(t)) * scale, zero rows where ignored.
template <class T>
void subtract_one_hot_and_scale(T* p, const int64_t* t, int64_t n, int64_t c, int64_t ignore_index,
                                double scale) {
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

// The compute dtype on the CPU: f64 stays f64, everything else runs in f32.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

void check_floating(const char* op, const Tensor& a) {
  RG_CHECK(a.defined() && is_floating(a.dtype()), op, "needs a floating-point tensor, got ", a.desc());
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_floating(op, a);
  if (a.dim() == 0) return view(softmax(unsqueeze(a, 0), 0, log), {});
  dim = wrap_dim(dim, a.dim(), op);
  // Move `dim` last, compute over dense rows, move it back.
  const DType ct = compute_dtype(a.dtype());
  Tensor x = contiguous(cast(transpose(a, dim, -1), ct));
  Tensor y = empty(x.shape(), ct, a.device());
  const int64_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  if (a.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::softmax_rows(ct, x.raw_data(), y.raw_data(), rows, cols, log);
#endif
  } else if (ct == DType::f64) softmax_rows(x.data<double>(), y.data<double>(), rows, cols, log);
  else softmax_rows(x.data<float>(), y.data<float>(), rows, cols, log);
  return contiguous(cast(transpose(y, dim, -1), a.dtype()));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, int64_t* counted) {
  check_floating("cross_entropy", logits);
  RG_CHECK(logits.dim() == 2, "cross_entropy", "logits must be (N, C), got ", logits.desc());
  RG_CHECK(target.defined() && target.dtype() == DType::i64 && target.dim() == 1 &&
               target.size(0) == logits.size(0),
           "cross_entropy", "target must be (N,) i64 class indices with N = ", logits.size(0),
           ", got ", target.desc(), " for logits ", logits.desc());
  RG_CHECK(target.device() == logits.device(), "cross_entropy", "logits ", logits.desc(), " and target ",
           target.desc(), " are on different devices");
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor logp = softmax(cast(logits, compute_dtype(logits.dtype())), 1, /*log=*/true);
  // The targets are read on the host (copied from a GPU: N integers) to check them and count them.
  Tensor t = contiguous(target.to(Device::cpu()));
  const int64_t* tp = t.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (tp[i] == ignore_index) continue;
    RG_CHECK(tp[i] >= 0 && tp[i] < c, "cross_entropy", "target[", i, "] = ", tp[i],
             " is not a class index in [0, ", c, ") (nor ignore_index ", ignore_index, ")");
    ++count;
  }
  if (counted) *counted = count;
  double total = 0;
  if (logits.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    // -logp[i, t[i]] per row on the device, summed there; one scalar comes back.
    Tensor on_device = contiguous(target);
    Tensor picked = empty({n}, logp.dtype(), logits.device());
    cuda::nll_pick(logp.dtype(), logp.raw_data(), on_device.data<int64_t>(), picked.raw_data(), n, c, ignore_index);
    total = reduce(ReduceOp::sum, picked, {}, false).item();
#endif
  } else {
    for (int64_t i = 0; i < n; ++i) {
      if (tp[i] == ignore_index) continue;
      total -= logp.dtype() == DType::f64 ? logp.data<double>()[i * c + tp[i]] : logp.data<float>()[i * c + tp[i]];
    }
  }
  Tensor out = empty({}, logits.dtype(), logits.device());
  out.fill_(count ? total / static_cast<double>(count) : 0.0);
  return out;
}

// d/dlogits of mean_i(-log softmax(x_i)[t_i]) = (softmax(x_i) - onehot(t_i)) / count, 0 on ignored rows.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const DType ct = compute_dtype(logits.dtype());
  Tensor p = softmax(cast(logits, ct), 1, /*log=*/false);  // dense (N, C)
  Tensor t = contiguous(target.to(Device::cpu()));
  const int64_t* tp = t.data<int64_t>();
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += tp[i] != ignore_index;
  const double scale = count ? grad.item() / static_cast<double>(count) : 0.0;
  if (p.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    Tensor on_device = contiguous(target);
    cuda::softmax_minus_one_hot(ct, p.raw_data(), on_device.data<int64_t>(), n, c, ignore_index, scale);
#endif
  } else if (ct == DType::f64) {
    subtract_one_hot_and_scale(p.data<double>(), tp, n, c, ignore_index, scale);
  } else {
    subtract_one_hot_and_scale(p.data<float>(), tp, n, c, ignore_index, scale);
  }
  return cast(p, logits.dtype());
}

}  // namespace ringgrad::native
