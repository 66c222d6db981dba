// ringgrad's own single-threaded f32 GEMM for the small shapes of training steps (AVX2 + FMA, and an
// AVX-512 tile where the CPU has it and cpu_isa() selects it: core/cpu_isa.h).
// See Note [Our own GEMM for short products] in tiled_sgemm.cpp for why it exists and when
// cpu::gemm uses it instead of OpenBLAS.
#pragma once

#include <cstdint>

namespace ringgrad::cpu {

// True when this build has the kernel (compiled for AVX2 + FMA, the default -march=x86-64-v3).
bool tiled_sgemm_available();

// Row-major C(m, n) = alpha * op(A)(m, k) * op(B)(k, n) + beta * C, with the CBLAS meaning of the
// arguments (lda, ldb, ldc: row strides as stored). beta == 0 never reads C (NaN in C is dropped),
// as in BLAS. Correct for every shape; fast where Note [Our own GEMM for short products] says.
void tiled_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same with C starting from C0 instead of itself: C = alpha * op(A) op(B) + beta * C0, C0 read at
// c0 with row stride ldc0 -- 0 adds one row (a bias) to every row of C, which is never read. The
// arithmetic is tiled_sgemm's on a C that held C0: the same bits. With gelu (row stride ldc) also
// gelu = GELU(C), each tile's while it is in L1 (the same bits as gelu_rows on the finished C).
void tiled_sgemm_from(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, const float* c0, int64_t ldc0, float* c,
                      int64_t ldc, float* gelu = nullptr);

// gelu(r, j) = GELU(c(r, j)) (tanh form, core/elementwise.h's GeluOp) over rows x cols of row stride
// ld, with the plain elementwise kernel's arithmetic on the selected ISA.
void gelu_rows(const float* c, float* gelu, int64_t ld, int64_t rows, int64_t cols);

// Whether cpu::gemm hands an f32 product of this shape to tiled_sgemm (otherwise OpenBLAS takes it).
// Depends on the selected ISA (core/cpu_isa.h): the AVX-512 path also takes long products.
// RINGGRAD_GEMM=openblas in the environment sends everything to OpenBLAS (for A/B measurements).
bool tiled_sgemm_suits(bool trans_a, int64_t m, int64_t n, int64_t k);

}  // namespace ringgrad::cpu
