// cuBLAS products the CUDA kernels build on (internal to core/cuda/): the strided-batched GEMM of
// attention (core/cuda/attention.cu). The plain GEMM every backend has is in core/kernels.h.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ringgrad::cuda {

// Row-major C_i = alpha op(A_i) op(B_i) + beta C_i for i < batch, A_i = a + i * stride_a (elements),
// likewise B_i and C_i; otherwise as gemm. f32, f64, f16, bf16. Every pointer on one device.
void gemm_strided_batched(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                          double beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace ringgrad::cuda
