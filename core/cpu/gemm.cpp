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
