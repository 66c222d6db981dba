// The single place where an op's kernel is chosen by device: each function forwards to cpu:: or
// cuda:: (core/kernels.h). Without CUDA compiled in, a CUDA tensor cannot exist (its allocator
// throws), so the CUDA branch is simply absent.
#pragma once

#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad::native {

[[noreturn]] inline void no_backend(const char* op, Device d) {
  RG_FAIL(op, "no kernel for device ", d.str(), " in this build");
}

inline void backend_unary(Device d, UnaryOp op, ScalarArgs s, DType t, const ElementwiseArgs& a) {
  if (d.is_cpu()) return cpu::unary(op, s, t, a);
#ifdef RINGGRAD_WITH_CUDA
  return cuda::unary(op, s, t, a);
#endif
  no_backend(unary_op_name(op), d);
}

inline void backend_binary(Device d, BinaryOp op, DType t, const ElementwiseArgs& a) {
  if (d.is_cpu()) return cpu::binary(op, t, a);
#ifdef RINGGRAD_WITH_CUDA
  return cuda::binary(op, t, a);
#endif
  no_backend(binary_op_name(op), d);
}

inline void backend_where(Device d, DType t, const ElementwiseArgs& a) {
  if (d.is_cpu()) return cpu::where(t, a);
#ifdef RINGGRAD_WITH_CUDA
  return cuda::where(t, a);
#endif
  no_backend("where", d);
}

inline void backend_cast_copy(Device d, DType out, DType in, const ElementwiseArgs& a) {
  if (d.is_cpu()) return cpu::cast_copy(out, in, a);
#ifdef RINGGRAD_WITH_CUDA
  return cuda::cast_copy(out, in, a);
#endif
  no_backend("copy", d);
}

inline void backend_reduce_rows(Device d, ReduceOp op, DType t, const void* in, void* out, int64_t rows,
                                int64_t cols) {
  if (d.is_cpu()) return cpu::reduce_rows(op, t, in, out, rows, cols);
#ifdef RINGGRAD_WITH_CUDA
  return cuda::reduce_rows(op, t, in, out, rows, cols);
#endif
  no_backend("reduce", d);
}

inline void backend_gemm(Device d, DType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                         const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c,
                         int64_t ldc) {
  if (d.is_cpu()) return cpu::gemm(t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#ifdef RINGGRAD_WITH_CUDA
  return cuda::gemm(t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
  no_backend("matmul", d);
}

}  // namespace ringgrad::native
