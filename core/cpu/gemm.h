// The CPU GEMM without the pool (internal to core/cpu/): for kernels that already run on every pool
// thread and call a GEMM from each (the convolution's per-sample products, Note [Convolution one
// sample at a time] in core/cpu/conv.cpp). cpu::gemm (core/kernels.h) is this, split over the pool.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ringgrad::cpu {

// cpu::gemm's arguments and meaning (f32 through tiled_sgemm or OpenBLAS, f64 through OpenBLAS), on
// the calling thread only.
void gemm_on_this_thread(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                         const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc);

}  // namespace ringgrad::cpu
