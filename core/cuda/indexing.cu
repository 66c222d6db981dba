// Indexing kernels on CUDA: index_select / index_add (embedding forward and backward), gather /
// scatter_add, one_hot. The CPU versions are in core/cpu/indexing.cpp. Index values are checked
// here, by the kernels, not on the host (Note [Device-side index checks], core/cuda/device_checks.h):
// a value out of range is recorded and not used -- the selecting kernels write 0 in its place, the
// adding ones skip it.
//
// The adding kernels use atomicAdd: repeated indices (a token that occurs twice in a batch) add into
// one row from several threads. Float atomics make the order of those additions, and so the last
// bits of a sum, vary from run to run; the front end computes them in f32 / f64 only (the seam's
// backend_accumulate_dtype).
#include <cstdint>

#include "core/cuda/device.h"
#include "core/cuda/device_checks.h"
#include "core/cuda/launch.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

using namespace detail;

// Elements are copied as opaque words of their size, so one kernel serves every dtype.
template <class Word>
__global__ void index_select_kernel(const Word* src, const int64_t* index, Word* out, int64_t outer, int64_t mid,
                                    int64_t count, int64_t inner, BadIndexSink sink) {
  const int64_t total = outer * count * inner;
  for (int64_t e = first_thread(); e < total; e += thread_stride()) {
    const int64_t i = e % inner, k = (e / inner) % count, o = e / (inner * count);
    const int64_t row = index[k];
    out[e] = index_ok(sink, IndexCheck::index_select, row, k, mid) ? src[(o * mid + row) * inner + i] : Word(0);
  }
}

template <class T>
__global__ void index_add_kernel(T* out, const int64_t* index, const T* src, int64_t outer, int64_t mid, int64_t count,
                                 int64_t inner, BadIndexSink sink) {
  const int64_t total = outer * count * inner;
  for (int64_t e = first_thread(); e < total; e += thread_stride()) {
    const int64_t i = e % inner, k = (e / inner) % count, o = e / (inner * count);
    const int64_t row = index[k];
    if (index_ok(sink, IndexCheck::index_add, row, k, mid)) atomicAdd(out + (o * mid + row) * inner + i, src[e]);
  }
}

// The offset in `a` of index position p (See GatherGeometry in core/kernels.h); index[p] is in range.
__device__ int64_t gather_offset(const GatherGeometry& g, const int64_t* index, int64_t p) {
  int64_t rest = p, offset = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t coord = rest % g.index_shape[d];
    rest /= g.index_shape[d];
    offset += (d == g.dim ? index[p] : coord) * g.a_strides[d];
  }
  return offset;
}

template <class Word>
__global__ void gather_kernel(const Word* a, const int64_t* index, Word* out, int64_t count, GatherGeometry g,
                              BadIndexSink sink) {
  for (int64_t p = first_thread(); p < count; p += thread_stride())
    out[p] = index_ok(sink, IndexCheck::gather, index[p], p, g.dim_size) ? a[gather_offset(g, index, p)] : Word(0);
}

template <class T>
__global__ void scatter_add_kernel(T* out, const int64_t* index, const T* src, int64_t count, GatherGeometry g,
                                   BadIndexSink sink) {
  for (int64_t p = first_thread(); p < count; p += thread_stride())
    if (index_ok(sink, IndexCheck::scatter_add, index[p], p, g.dim_size))
      atomicAdd(out + gather_offset(g, index, p), src[p]);
}

__global__ void one_hot_kernel(const int64_t* index, double* out, int64_t count, int64_t classes, BadIndexSink sink) {
  for (int64_t i = first_thread(); i < count; i += thread_stride())
    if (index_ok(sink, IndexCheck::one_hot, index[i], i, classes)) out[i * classes + index[i]] = 1.0;
}

// Calls fn(Word{}) with an unsigned integer type of `element_size` bytes.
template <class Fn>
void dispatch_word(const char* op, size_t element_size, Fn&& fn) {
  switch (element_size) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
    default: RG_FAIL(op, "no CUDA kernel for elements of ", element_size, " bytes");
  }
}

}  // namespace

void index_select(size_t element_size, const void* src, const int64_t* index, void* out, int64_t outer, int64_t mid,
                  int64_t count, int64_t inner) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  const int device = device_of(out);
  DeviceGuard guard(device);
  dispatch_word("index_select", element_size, [&](auto word) {
    using W = decltype(word);
    index_select_kernel<W><<<blocks_for(total), kThreads>>>(static_cast<const W*>(src), index, static_cast<W*>(out),
                                                            outer, mid, count, inner, bad_index_sink(device));
  });
  RG_CUDA_CHECK_LAUNCH();
  sync_check_if_asked(device);
}

void index_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t outer, int64_t mid, int64_t count,
               int64_t inner) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  const int device = device_of(out);
  DeviceGuard guard(device);
  dispatch_compute("index_add", dtype, [&](auto tag) {
    using T = decltype(tag);
    index_add_kernel<T><<<blocks_for(total), kThreads>>>(static_cast<T*>(out), index, static_cast<const T*>(src), outer,
                                                         mid, count, inner, bad_index_sink(device));
  });
  RG_CUDA_CHECK_LAUNCH();
  sync_check_if_asked(device);
}

void gather(size_t element_size, const void* a, const int64_t* index, void* out, int64_t count,
            const GatherGeometry& geometry) {
  if (count == 0) return;
  const int device = device_of(out);
  DeviceGuard guard(device);
  dispatch_word("gather", element_size, [&](auto word) {
    using W = decltype(word);
    gather_kernel<W><<<blocks_for(count), kThreads>>>(static_cast<const W*>(a), index, static_cast<W*>(out), count,
                                                      geometry, bad_index_sink(device));
  });
  RG_CUDA_CHECK_LAUNCH();
  sync_check_if_asked(device);
}

void scatter_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t count,
                 const GatherGeometry& geometry) {
  if (count == 0) return;
  const int device = device_of(out);
  DeviceGuard guard(device);
  dispatch_compute("scatter_add", dtype, [&](auto tag) {
    using T = decltype(tag);
    scatter_add_kernel<T><<<blocks_for(count), kThreads>>>(static_cast<T*>(out), index, static_cast<const T*>(src),
                                                           count, geometry, bad_index_sink(device));
  });
  RG_CUDA_CHECK_LAUNCH();
  sync_check_if_asked(device);
}

void one_hot(const int64_t* index, double* out, int64_t count, int64_t classes) {
  if (count == 0) return;
  const int device = device_of(out);
  DeviceGuard guard(device);
  one_hot_kernel<<<blocks_for(count), kThreads>>>(index, out, count, classes, bad_index_sink(device));
  RG_CUDA_CHECK_LAUNCH();
  sync_check_if_asked(device);
}

}  // namespace ringgrad::cuda
