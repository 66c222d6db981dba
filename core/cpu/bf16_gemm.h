// The CPU's bf16 GEMM (internal to core/cpu/): bf16 operands multiplied with AVX512_BF16's
// dot-product instruction, accumulated in f32, rounded once to bf16. See Note [bf16 products on the
// CPU] in bf16_gemm.cpp.
#pragma once

#include <cstdint>

namespace ringgrad::cpu {

// Row-major C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C on bf16 bit patterns, with the
// CBLAS meaning of the arguments (lda, ldb, ldc: row strides as stored); beta == 0 never reads C.
// Only where cpu_has_bf16_dot() (core/cpu_isa.h); single-threaded (cpu::gemm splits it).
void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, float beta, uint16_t* c, int64_t ldc);

}  // namespace ringgrad::cpu
