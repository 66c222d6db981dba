// Row kernels on CUDA: softmax / log_softmax, the causal softmax of attention (and its backward),
// attention dropout, layer_norm (and its backward), and the two halves of cross-entropy (whose
// targets the kernels check, Note [Device-side index checks]). The CPU
// versions are in core/cpu/rows.cpp; the op front ends (core/native/softmax.cpp,
// core/native/transformer.cpp) check arguments and hand both the same dense rows in the same compute
// dtype (f32, or f64 for f64 tensors), so each formula below is the CPU's, distributed over a warp
// per row (See core/cuda/launch.h).
//
// Legend: rows = the product of all but the last dim, cols / C = the last dim, n = T for (T, T)
// attention matrices, mats = how many of them.
#include <cmath>
#include <limits>

#include "core/cuda/device.h"
#include "core/cuda/device_checks.h"
#include "core/cuda/launch.h"
#include "core/kernels.h"
#include "core/random.h"

namespace ringgrad::cuda {
namespace {

using namespace detail;

// ---- softmax / log_softmax: x, y (rows, cols) ---------------------------------------------------------
// Stable: shifted by the row maximum (0 when the row has no finite maximum, as on the CPU).
template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t rows, int64_t cols, bool take_log) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T max = -std::numeric_limits<T>::infinity();
    for (int64_t c = lane; c < cols; c += kWarp) max = xr[c] > max ? xr[c] : max;
    max = warp_max(max);
    if (!isfinite(max)) max = 0;
    T sum = 0;
    for (int64_t c = lane; c < cols; c += kWarp) sum += exp(xr[c] - max);
    sum = warp_sum(sum);
    if (take_log) {
      const T lse = log(sum);
      for (int64_t c = lane; c < cols; c += kWarp) yr[c] = xr[c] - max - lse;
    } else {
      const T inv = T(1) / sum;
      for (int64_t c = lane; c < cols; c += kWarp) yr[c] = exp(xr[c] - max) * inv;
    }
  }
}

// ---- causal softmax: s, y (mats, n, n); row r is query i = r % n, which sees keys 0..i -------------
// y[j] = softmax_{j <= i}(k s[j]), y[j > i] = 0.
template <class T>
__global__ void causal_softmax_kernel(const T* s, T* y, int64_t rows, int64_t n, T k) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const int64_t i = r % n;
    const T* sr = s + r * n;
    T* yr = y + r * n;
    T max = -std::numeric_limits<T>::infinity();
    for (int64_t j = lane; j <= i; j += kWarp) max = k * sr[j] > max ? k * sr[j] : max;
    max = warp_max(max);
    T sum = 0;
    for (int64_t j = lane; j <= i; j += kWarp) sum += exp(k * sr[j] - max);
    const T inv = T(1) / warp_sum(sum);
    for (int64_t j = lane; j < n; j += kWarp) yr[j] = j <= i ? exp(k * sr[j] - max) * inv : T(0);
  }
}

// ds[j] = k y[j] (g[j] - sum_l g[l] y[l]); masked entries (y = 0) get 0.
template <class T>
__global__ void causal_softmax_backward_kernel(const T* g, const T* y, T* ds, int64_t rows, int64_t n, T k) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const int64_t i = r % n;
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    T* dr = ds + r * n;
    T dot = 0;
    for (int64_t j = lane; j <= i; j += kWarp) dot += gr[j] * yr[j];
    dot = warp_sum(dot);
    for (int64_t j = lane; j < n; j += kWarp) dr[j] = j <= i ? k * yr[j] * (gr[j] - dot) : T(0);
  }
}

// out[e] = in[e] * keep(e) / (1 - rate) over a flat range (in may be out).
template <class T>
__global__ void dropout_kernel(const T* in, T* out, int64_t count, float rate, T scale, uint64_t seed,
                               uint64_t offset) {
  for (int64_t e = first_thread(); e < count; e += thread_stride())
    out[e] = dropout_keep(seed, offset, static_cast<uint64_t>(e), rate) ? in[e] * scale : T(0);
}

// ---- layer_norm: x, y (rows, C); w, b (C) or null; mean, rstd (rows) ------------------------------------
template <class T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t C,
                                  T eps) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T sum = 0;
    for (int64_t c = lane; c < C; c += kWarp) sum += xr[c];
    const T m = warp_sum(sum) / static_cast<T>(C);
    T sq = 0;
    for (int64_t c = lane; c < C; c += kWarp) sq += (xr[c] - m) * (xr[c] - m);
    const T rs = T(1) / sqrt(warp_sum(sq) / static_cast<T>(C) + eps);
    for (int64_t c = lane; c < C; c += kWarp) {
      const T xhat = (xr[c] - m) * rs;
      yr[c] = (w ? xhat * w[c] : xhat) + (b ? b[c] : T(0));
    }
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g w.
template <class T>
__global__ void layer_norm_dx_kernel(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                                     int64_t rows, int64_t C) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const T* gr = g + r * C;
    const T* xr = x + r * C;
    T* dxr = dx + r * C;
    const T m = mean[r], rs = rstd[r];
    T mean_d = 0, mean_dx = 0;
    for (int64_t c = lane; c < C; c += kWarp) {
      const T d = w ? gr[c] * w[c] : gr[c];
      mean_d += d;
      mean_dx += d * (xr[c] - m) * rs;
    }
    mean_d = warp_sum(mean_d) / static_cast<T>(C);
    mean_dx = warp_sum(mean_dx) / static_cast<T>(C);
    for (int64_t c = lane; c < C; c += kWarp) {
      const T d = w ? gr[c] * w[c] : gr[c];
      dxr[c] = rs * (d - mean_d - (xr[c] - m) * rs * mean_dx);
    }
  }
}

// dw = sum_rows g xhat, db = sum_rows g, in two passes so that no two threads add into one output:
// pass 1: thread (chunk, c) sums rows [chunk * kRowsPerChunk, ...) of column c into partial[chunk, c]
// (adjacent threads read adjacent columns: coalesced); pass 2 sums each column's partials.
constexpr int64_t kRowsPerChunk = 64;

template <class T>
__global__ void layer_norm_dwdb_partial_kernel(const T* g, const T* x, const T* mean, const T* rstd, T* dw_part,
                                               T* db_part, int64_t rows, int64_t C, int64_t chunks) {
  for (int64_t t = first_thread(); t < chunks * C; t += thread_stride()) {
    const int64_t chunk = t / C, c = t % C;
    const int64_t end = (chunk + 1) * kRowsPerChunk < rows ? (chunk + 1) * kRowsPerChunk : rows;
    T dw = 0, db = 0;
    for (int64_t r = chunk * kRowsPerChunk; r < end; ++r) {
      const T gv = g[r * C + c];
      dw += gv * (x[r * C + c] - mean[r]) * rstd[r];
      db += gv;
    }
    if (dw_part) dw_part[t] = dw;
    if (db_part) db_part[t] = db;
  }
}

template <class T>
__global__ void sum_chunks_kernel(const T* part, T* out, int64_t chunks, int64_t C) {
  for (int64_t c = first_thread(); c < C; c += thread_stride()) {
    T sum = 0;
    for (int64_t k = 0; k < chunks; ++k) sum += part[k * C + c];
    out[c] = sum;
  }
}

// ---- cross-entropy: logp, p (n, c); target (n) -------------------------------------------------------
// A row counts when its target is not ignore_index and is a class index; one that is neither is
// reported (Note [Device-side index checks]) and counts as ignored.
__device__ __forceinline__ bool target_in_range(int64_t t, int64_t c) { return t >= 0 && t < c; }

// picked[i] = -logp[i, t[i]], 0 on rows that do not count.
template <class T>
__global__ void nll_pick_kernel(const T* logp, const int64_t* target, T* picked, int64_t n, int64_t c,
                                int64_t ignore_index, BadIndexSink sink) {
  for (int64_t i = first_thread(); i < n; i += thread_stride()) {
    const int64_t t = target[i];
    const bool counts = t != ignore_index && index_ok(sink, IndexCheck::cross_entropy, t, i, c);
    picked[i] = counts ? -logp[i * c + t] : T(0);
  }
}

// One block: *count = the rows that count, *loss = *total / *count (0 when none), in double as on
// the CPU. total is null when n == 0.
template <class T>
__global__ void nll_mean_kernel(const T* total, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
                                double* loss, int64_t* count) {
  __shared__ long long per_warp[kWarpsPerBlock];
  long long mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    mine += t != ignore_index && target_in_range(t, c);
  }
  mine = warp_sum(mine);
  if (threadIdx.x % kWarp == 0) per_warp[threadIdx.x / kWarp] = mine;
  __syncthreads();
  if (threadIdx.x != 0) return;
  long long counted = 0;
  for (int w = 0; w < kWarpsPerBlock; ++w) counted += per_warp[w];
  *count = counted;
  *loss = counted ? static_cast<double>(*total) / static_cast<double>(counted) : 0.0;
}

// p = (p - onehot(t)) * (grad / count), rows that do not count zeroed. One thread per element; each
// computes the scale from the two device scalars (cached loads) as the CPU does, in double.
template <class T>
__global__ void minus_one_hot_kernel(T* p, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
                                     const T* grad, const int64_t* count) {
  const int64_t counted = *count;
  const T scale = counted ? static_cast<T>(static_cast<double>(*grad) / static_cast<double>(counted)) : T(0);
  for (int64_t e = first_thread(); e < n * c; e += thread_stride()) {
    const int64_t i = e / c, j = e % c;
    const int64_t t = target[i];
    const bool counts = t != ignore_index && target_in_range(t, c);
    p[e] = counts ? (p[e] - (j == t ? T(1) : T(0))) * scale : T(0);
  }
}

}  // namespace

void softmax_rows(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, bool log) {
  if (rows == 0 || cols == 0) return;
  DeviceGuard guard(device_of(y));
  dispatch_compute(log ? "log_softmax" : "softmax", dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T>
        <<<blocks_for_rows(rows), kThreads>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, log);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void causal_softmax_rows(DType dtype, const void* s, void* y, int64_t mats, int64_t n, double scale) {
  if (mats == 0 || n == 0) return;
  DeviceGuard guard(device_of(y));
  dispatch_compute("causal_softmax", dtype, [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_kernel<T><<<blocks_for_rows(mats * n), kThreads>>>(static_cast<const T*>(s), static_cast<T*>(y),
                                                                      mats * n, n, static_cast<T>(scale));
  });
  RG_CUDA_CHECK_LAUNCH();
}

void causal_softmax_backward_rows(DType dtype, const void* g, const void* y, void* ds, int64_t mats, int64_t n,
                                  double scale) {
  if (mats == 0 || n == 0) return;
  DeviceGuard guard(device_of(ds));
  dispatch_compute("causal_softmax_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    causal_softmax_backward_kernel<T>
        <<<blocks_for_rows(mats * n), kThreads>>>(static_cast<const T*>(g), static_cast<const T*>(y),
                                                  static_cast<T*>(ds), mats * n, n, static_cast<T>(scale));
  });
  RG_CUDA_CHECK_LAUNCH();
}

void dropout_flat(DType dtype, const void* in, void* out, int64_t count, double rate, uint64_t seed, uint64_t offset) {
  if (count == 0) return;
  DeviceGuard guard(device_of(out));
  dispatch_compute("dropout", dtype, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<blocks_for(count), kThreads>>>(static_cast<const T*>(in), static_cast<T*>(out), count,
                                                       static_cast<float>(rate), static_cast<T>(1.0 / (1.0 - rate)),
                                                       seed, offset);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void layer_norm_rows(DType dtype, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                     int64_t rows, int64_t C, double eps) {
  if (rows == 0 || C == 0) return;
  DeviceGuard guard(device_of(y));
  dispatch_compute("layer_norm", dtype, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<blocks_for_rows(rows), kThreads>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                              static_cast<const T*>(b), static_cast<T*>(y),
                                                              static_cast<T*>(mean), static_cast<T*>(rstd), rows, C,
                                                              static_cast<T>(eps));
  });
  RG_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward_rows(DType dtype, const void* g, const void* x, const void* w, const void* mean,
                              const void* rstd, void* dx, void* dw, void* db, int64_t rows, int64_t C) {
  if (C == 0) return;
  const void* any_out = dx ? dx : dw ? dw : db;
  if (any_out == nullptr) return;
  const int device = device_of(any_out);
  DeviceGuard guard(device);
  dispatch_compute("layer_norm_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* gt = static_cast<const T*>(g);
    const T* xt = static_cast<const T*>(x);
    const T* mt = static_cast<const T*>(mean);
    const T* rt = static_cast<const T*>(rstd);
    if (dx && rows > 0) {
      layer_norm_dx_kernel<T>
          <<<blocks_for_rows(rows), kThreads>>>(gt, xt, static_cast<const T*>(w), mt, rt, static_cast<T*>(dx), rows, C);
      RG_CUDA_CHECK_LAUNCH();
    }
    if (!dw && !db) return;
    const int64_t chunks = std::max<int64_t>(1, (rows + kRowsPerChunk - 1) / kRowsPerChunk);
    Scratch part(allocator(device), sizeof(T) * static_cast<size_t>(2 * chunks * C));
    T* dw_part = dw ? part.as<T>() : nullptr;
    T* db_part = db ? part.as<T>() + chunks * C : nullptr;
    layer_norm_dwdb_partial_kernel<T>
        <<<blocks_for(chunks * C), kThreads>>>(gt, xt, mt, rt, dw_part, db_part, rows, C, chunks);
    RG_CUDA_CHECK_LAUNCH();
    if (dw) sum_chunks_kernel<T><<<blocks_for(C), kThreads>>>(dw_part, static_cast<T*>(dw), chunks, C);
    if (db) sum_chunks_kernel<T><<<blocks_for(C), kThreads>>>(db_part, static_cast<T*>(db), chunks, C);
    RG_CUDA_CHECK_LAUNCH();
  });
}

// -logp[i, t[i]] per row on the device, summed there (reduce_rows, as the front end's sum of a tensor
// would), then divided by the count there: nothing comes back to the host.
void nll_mean(DType dtype, const void* logp, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
              double* loss, int64_t* count) {
  const int device = device_of(loss);
  DeviceGuard guard(device);
  const size_t esize = dtype_size(dtype);
  dispatch_compute("cross_entropy", dtype, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) {
      nll_mean_kernel<T><<<1, kThreads>>>(nullptr, target, 0, c, ignore_index, loss, count);
      RG_CUDA_CHECK_LAUNCH();
      return;
    }
    Scratch picked(allocator(device), esize * static_cast<size_t>(n));
    nll_pick_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<const T*>(logp), target, picked.as<T>(), n, c,
                                                    ignore_index, bad_index_sink(device));
    RG_CUDA_CHECK_LAUNCH();
    Scratch total(allocator(device), esize);
    reduce_rows(RowReduction::sum, dtype, picked.as<void>(), total.as<void>(), 1, n);
    nll_mean_kernel<T><<<1, kThreads>>>(total.as<T>(), target, n, c, ignore_index, loss, count);
    RG_CUDA_CHECK_LAUNCH();
  });
  sync_check_if_asked(device);
}

void softmax_minus_one_hot(DType dtype, void* p, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
                           const void* grad, const int64_t* count) {
  if (n == 0 || c == 0) return;
  DeviceGuard guard(device_of(p));
  dispatch_compute("cross_entropy_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    minus_one_hot_kernel<T><<<blocks_for(n * c), kThreads>>>(static_cast<T*>(p), target, n, c, ignore_index,
                                                             static_cast<const T*>(grad), count);
  });
  RG_CUDA_CHECK_LAUNCH();
}

}  // namespace ringgrad::cuda
