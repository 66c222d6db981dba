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
// Copies bytes between any two of {host, device}; synchronous with respect to the host.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
}  // namespace cuda
#endif

#undef RINGGRAD_BACKEND_KERNELS

}  // namespace ringgrad
