// GEMM on the CPU through CBLAS (OpenBLAS). Row-major throughout; transposed operands are passed as
// transpose flags with their stored row stride, so transposed views are never copied.
//
// Note [GEMMs split over the pool]: OpenBLAS runs single-threaded (core/parallel.cpp), and a large
// product is cut into one block of rows (or columns) of C per compute thread, each a serial BLAS call
// on the pool. Why: OpenBLAS's own worker threads spin (sched_yield) between calls, and on two cores
// that spinning takes the core from the pool's elementwise work and from the other BLAS thread
// (tuning history: docs/performance.md, "Splitting a product over the pool"). Results may differ in
// the last bits with the thread count: a block can fall under OpenBLAS's small-matrix path, which
// sums K in another order.
//
// Short f32 products (one K panel) go to our own kernel instead of OpenBLAS: Note [Our own GEMM for
// short products] in core/cpu/tiled_sgemm.cpp.
#include <cblas.h>

#include <algorithm>

#include "core/cpu/bf16_gemm.h"
#include "core/cpu/gemm.h"
#include "core/cpu/tiled_sgemm.h"
#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace ringgrad::cpu {
namespace {

// Below this many flops a product is not worth a hand-off to the pool.
constexpr double kSplitFlops = 4e6;

}  // namespace

void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
          int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  const int threads = num_threads();
  const size_t es = dtype_size(dtype);
  if (threads > 1 && 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >= kSplitFlops) {
    // See Note [GEMMs split over the pool]: C's rows (A's rows) or C's columns (B's columns), the
    // longer side.
    const char* A = static_cast<const char*>(a);
    const char* B = static_cast<const char*>(b);
    char* C = static_cast<char*>(c);
    if (m >= n) {
      parallel_for(m, std::max<int64_t>(16, (m + threads - 1) / threads), [&](int64_t lo, int64_t hi) {
        const char* a_part = trans_a ? A + lo * es : A + lo * lda * es;
        gemm_on_this_thread(dtype, trans_a, trans_b, hi - lo, n, k, alpha, a_part, lda, b, ldb, beta, C + lo * ldc * es,
                            ldc);
      });
    } else {
      parallel_for(n, std::max<int64_t>(16, (n + threads - 1) / threads), [&](int64_t lo, int64_t hi) {
        const char* b_part = trans_b ? B + lo * ldb * es : B + lo * es;
        gemm_on_this_thread(dtype, trans_a, trans_b, m, hi - lo, k, alpha, a, lda, b_part, ldb, beta, C + lo * es, ldc);
      });
    }
    return;
  }
  gemm_on_this_thread(dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Note [A bias as the GEMM's starting point]: linear's y = x W^T + b used to be two passes over y --
// every row set to b, then the GEMM adding x W^T to it (beta = 1) -- and the first wrote 4 MiB per
// GPT-mini layer only for the GEMM to read it back. tiled_sgemm_from starts its first K panel from
// the bias row itself (row stride 0), so y is written once; it is the same arithmetic on the same
// values, so y is the same to the bit. Products that OpenBLAS takes keep the two passes.
// With gelu, the last K panel's epilogue also writes GELU(y) of each register tile while it is in
// L1: the MLP's c_fc and its activation in one pass over y (4 MiB per GPT-mini layer), again the
// same bits as the GELU op on the finished y.
void gemm_add_row(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                  const float* b, int64_t ldb, const float* row, float* c, int64_t ldc, float* gelu) {
  const auto part = [&](int64_t rows, int64_t cols, const float* a_part, const float* b_part, const float* row_part,
                        float* c_part) {
    float* gelu_part = gelu ? gelu + (c_part - c) : nullptr;
    if (tiled_sgemm_suits(trans_a, rows, cols, k)) {
      tiled_sgemm_from(trans_a, trans_b, rows, cols, k, 1.0f, a_part, lda, b_part, ldb, 1.0f, row_part, 0, c_part, ldc,
                       gelu_part);
      return;
    }
    for (int64_t i = 0; i < rows; ++i) std::copy_n(row_part, cols, c_part + i * ldc);
    gemm_on_this_thread(DType::f32, trans_a, trans_b, rows, cols, k, 1.0, a_part, lda, b_part, ldb, 1.0, c_part, ldc);
    if (gelu_part != nullptr) gelu_rows(c_part, gelu_part, ldc, rows, cols);
  };
  const int threads = num_threads();
  if (threads > 1 && 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >= kSplitFlops) {
    // Split as cpu::gemm splits (Note [GEMMs split over the pool]), so the blocks are the same.
    if (m >= n) {
      parallel_for(m, std::max<int64_t>(16, (m + threads - 1) / threads), [&](int64_t lo, int64_t hi) {
        part(hi - lo, n, trans_a ? a + lo : a + lo * lda, b, row, c + lo * ldc);
      });
    } else {
      parallel_for(n, std::max<int64_t>(16, (n + threads - 1) / threads), [&](int64_t lo, int64_t hi) {
        part(m, hi - lo, a, trans_b ? b + lo * ldb : b + lo, row + lo, c + lo);
      });
    }
    return;
  }
  part(m, n, a, b, row, c);
}

void gemm_on_this_thread(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                         const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if (dtype == DType::f32 && tiled_sgemm_suits(trans_a, m, n, k)) {
    tiled_sgemm(trans_a, trans_b, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, static_cast<float>(beta), static_cast<float*>(c), ldc);
  } else if (dtype == DType::f32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, static_cast<float>(beta), static_cast<float*>(c), ldc);
  } else if (dtype == DType::f64) {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(a), lda,
                static_cast<const double*>(b), ldb, beta, static_cast<double*>(c), ldc);
  } else if (dtype == DType::bf16 && cpu_has_bf16_dot()) {
    bf16_gemm(trans_a, trans_b, m, n, k, static_cast<float>(alpha), static_cast<const uint16_t*>(a), lda,
              static_cast<const uint16_t*>(b), ldb, static_cast<float>(beta), static_cast<uint16_t*>(c), ldc);
  } else {
    RG_FAIL("gemm", "the CPU GEMM takes f32, f64 and (with AVX512_BF16) bf16, got ", dtype_name(dtype));
  }
}

}  // namespace ringgrad::cpu
