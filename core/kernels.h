// The kernel interface each backend implements, with identical signatures in ringgrad::cpu
// (core/cpu/) and ringgrad::cuda (core/cuda/). Kernels see raw pointers and strides only: argument
// checking, output allocation and the choice of backend happen once, in the op front ends
// (core/native/*.cpp). All pointers of one call live on that backend's device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/elementwise.h"

namespace ringgrad {

// Reductions over the last axis of a dense (rows, cols) input, one output per row.
enum class ReduceOp : uint8_t { sum, mean, max, argmax };

#define RINGGRAD_BACKEND_KERNELS                                                                  \
  /* operands: 0 out, 1 in; out and in have `dtype` */                                            \
  void unary(UnaryOp op, ScalarArgs s, DType dtype, const ElementwiseArgs& args);                 \
  /* operands: 0 out, 1 a, 2 b; a and b have `dtype`; out too, or u8 for comparisons */            \
  void binary(BinaryOp op, DType dtype, const ElementwiseArgs& args);                             \
  /* operands: 0 out, 1 cond (u8), 2 a, 3 b */                                                    \
  void where(DType dtype, const ElementwiseArgs& args);                                           \
  /* operands: 0 out (out_dtype), 1 in (in_dtype); converts with round-to-nearest-even */         \
  void cast_copy(DType out_dtype, DType in_dtype, const ElementwiseArgs& args);                   \
  /* in: dense (rows, cols) of dtype; out: rows elements of dtype (i64 for argmax). */           \
  /* sum/mean accumulate in double (f32, f64) or float (f16, bf16). */                          \
  void reduce_rows(ReduceOp op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols); \
  /* Row-major C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, f32 or f64 (and on CUDA */ \
  /* also f16/bf16 with f32 accumulation). lda/ldb/ldc are row strides of A, B, C as stored. */  \
  void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, \
            const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c,          \
            int64_t ldc);

namespace cpu {
RINGGRAD_BACKEND_KERNELS
/* sum / mean over the leading dim of a dense (rows, cols) input without transposing it first: */
/* out[j] = sum_i in[i, j] (cols outputs; a bias gradient), accumulating as reduce_rows does */
/* (double for f32). CPU only so far. */
void reduce_cols(ReduceOp op, DType dtype, const void* in, void* out, int64_t rows, int64_t cols);
Allocator& allocator();
}  // namespace cpu

#ifdef RINGGRAD_WITH_CUDA
namespace cuda {
RINGGRAD_BACKEND_KERNELS
Allocator& allocator(int device);
int device_count();
// Copies bytes between any two of {host, device}; synchronous with respect to the host, except a
// host-to-device copy with non_blocking from pinned memory (src_pinned): that one is queued on the
// default stream (before any kernel launched later) and returns at once.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool non_blocking = false, bool src_pinned = false);
// Page-locked host memory (core/cuda/pinned.cu): a released block is reused only after every copy
// queued before its release has finished.
void* pinned_allocate(size_t nbytes);
void pinned_release(void* ptr, size_t nbytes);
void pinned_note_use(const void* ptr, int device);  // an async copy from ptr was queued on `device`
// The GPU whose context host-side driver calls (pinned allocation) use: the program's own device.
void set_home_device(int device);
MemoryStats pinned_memory_stats();

// ---- CUDA kernels whose CPU versions live in the op front ends (core/native/) ------------------------
// Inputs are dense; `dtype` is the compute dtype, f32 or f64 (the front ends compute f16 / bf16 in
// f32, as on the CPU). Every pointer is on one device.
// softmax.cpp: x, y (rows, cols).
void softmax_rows(DType dtype, const void* x, void* y, int64_t rows, int64_t cols, bool log);
// cross-entropy: picked[i] = -logp[i, target[i]] (0 where target[i] == ignore_index); and the
// gradient p = (softmax - onehot(target)) * scale in place, ignored rows zeroed. logp, p: (n, c).
void nll_pick(DType dtype, const void* logp, const int64_t* target, void* picked, int64_t n, int64_t c,
              int64_t ignore_index);
void softmax_minus_one_hot(DType dtype, void* p, const int64_t* target, int64_t n, int64_t c, int64_t ignore_index,
                           double scale);
// transformer.cpp: x, y, dx (rows, C); w, b, dw, db (C) or null; mean, rstd (rows).
void layer_norm_rows(DType dtype, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                     int64_t rows, int64_t C, double eps);
void layer_norm_backward_rows(DType dtype, const void* g, const void* x, const void* w, const void* mean,
                              const void* rstd, void* dx, void* dw, void* db, int64_t rows, int64_t C);
// s, y, g, ds: (mats, n, n), the causal softmax of scale * s and its backward.
void causal_softmax_rows(DType dtype, const void* s, void* y, int64_t mats, int64_t n, double scale);
void causal_softmax_backward_rows(DType dtype, const void* g, const void* y, void* ds, int64_t mats, int64_t n,
                                  double scale);
// out[e] = in[e] * keep(e) / (1 - rate) for the flat index e < count, keep = dropout_keep(seed,
// offset, e, rate) of core/random.h (the mask attention dropout recomputes). in may be out.
void dropout_flat(DType dtype, const void* in, void* out, int64_t count, double rate, uint64_t seed,
                  uint64_t offset);
// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, A_i = a + i * stride_a (elements),
// likewise B_i and C_i; otherwise as gemm. f32, f64, f16, bf16.
void gemm_strided_batched(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                          double beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch);

// indexing.cpp. A dense tensor split around `dim` as (outer, mid, inner); index values are checked
// by the front end. index_select: out (outer, count, inner) = src (outer, mid, inner) rows index[k].
void index_select(size_t element_size, const void* src, const int64_t* index, void* out, int64_t outer,
                  int64_t mid, int64_t count, int64_t inner);
// out (outer, mid, inner) += src (outer, count, inner) at rows index[k]; f32 / f64 (atomic adds).
void index_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t outer, int64_t mid,
               int64_t count, int64_t inner);
// gather / scatter_add: position p of the dense index tensor (shape index_shape) maps to the element
// of `a` (strides a_strides) at p's coordinates with the one along `dim` replaced by index[p].
struct GatherGeometry {
  static constexpr int kMaxDims = 8;
  int ndim = 0, dim = 0;
  int64_t index_shape[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};
};
void gather(size_t element_size, const void* a, const int64_t* index, void* out, int64_t count,
            const GatherGeometry& geometry);
// out[...] += src[p]; f32 / f64 (atomic adds).
void scatter_add(DType dtype, void* out, const int64_t* index, const void* src, int64_t count,
                 const GatherGeometry& geometry);
// out (count, classes), zeroed by the caller: out[i, index[i]] = 1.
void one_hot(const int64_t* index, double* out, int64_t count, int64_t classes);

// conv.cpp: cuDNN convolution, NCHW, square stride / padding, f32 / f64 / f16 / bf16 (f32 compute
// for the 16-bit types). x (N, C, H, W), w (O, C, KH, KW), y (N, O, OH, OW). dx / dw are overwritten.
struct ConvShape {
  int64_t N, C, H, W, O, KH, KW, stride, padding, OH, OW;
};
void conv2d_forward(DType dtype, const ConvShape& s, const void* x, const void* w, void* y);
void conv2d_backward_data(DType dtype, const ConvShape& s, const void* dy, const void* w, void* dx);
void conv2d_backward_filter(DType dtype, const ConvShape& s, const void* x, const void* dy, void* dw);
// max pooling over planes = N * C planes of (H, W) -> (OH, OW); indices[p] = flat position of the
// maximum in its plane (as on the CPU). The backward overwrites dx: (planes, H, W) with the gradient.
void max_pool2d(DType dtype, const void* x, void* y, int64_t* indices, int64_t planes, int64_t H, int64_t W,
                int64_t OH, int64_t OW, int64_t kernel, int64_t stride, int64_t padding);
void max_pool2d_backward(DType dtype, const void* dy, const int64_t* indices, void* dx, int64_t planes,
                         int64_t plane_in, int64_t plane_out);
// cuDNN max pooling (Note [Max pooling on cuDNN], core/cuda/conv.cu): x (N, C, H, W) -> y (N, C, OH, OW)
// in any floating dtype; the backward finds each window's maximum from x and y and overwrites dx.
struct PoolShape {
  int64_t N, C, H, W, OH, OW, kernel, stride, padding;
};
void max_pool2d_cudnn(DType dtype, const void* x, void* y, const PoolShape& s);
void max_pool2d_cudnn_backward(DType dtype, const void* x, const void* y, const void* dy, void* dx, const PoolShape& s);
}  // namespace cuda
#endif

#undef RINGGRAD_BACKEND_KERNELS

}  // namespace ringgrad
