// GEMM on the CPU through CBLAS (OpenBLAS). Row-major throughout; transposed operands are passed as
// transpose flags with their stored row stride, so transposed views are never copied.
#include <cblas.h>

#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad::cpu {

void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if (dtype == DType::f32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, static_cast<float>(beta), static_cast<float*>(c), ldc);
  } else if (dtype == DType::f64) {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(a), lda,
                static_cast<const double*>(b), ldb, beta, static_cast<double*>(c), ldc);
  } else {
    RG_FAIL("gemm", "the CPU GEMM takes f32 or f64, got ", dtype_name(dtype));
  }
}

}  // namespace ringgrad::cpu
