// Matrix multiply on CUDA through cuBLAS.
//
// ringgrad stores matrices row-major; cuBLAS reads them column-major. A row-major (r, c) matrix with
// row stride ld is, byte for byte, the column-major (c, r) matrix with leading dimension ld: its
// transpose. So instead of C = op(A) op(B) we ask cuBLAS for
//     C^T (n, m) = op(B)^T (n, k) * op(A)^T (k, m)
// passing B before A, with the same transpose flags and the dimensions m and n swapped. No data moves.
//
// f32 runs in true f32: cuBLAS uses TF32 tensor cores only when asked (CUBLAS_TF32_TENSOR_OP_MATH or
// the NVIDIA_TF32_OVERRIDE environment variable), and ringgrad asks only after set_allow_tf32(true)
// (core/device.h). f16/bf16 accumulate in
// f32 (cublasGemmEx with CUBLAS_COMPUTE_32F), then round once to the output type.
#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/cuda/gemm.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

// One handle per device, created on first use and kept: creating a handle costs milliseconds and
// allocates device memory. Deliberately leaked like the allocators: cublasDestroy after the CUDA
// runtime has shut down (static destruction) can fail. Calls use the legacy default stream, like
// every other kernel of this backend.
cublasHandle_t handle_for(int device) {
  static std::mutex mutex;
  static auto* handles = new std::vector<cublasHandle_t>(device_count(), nullptr);
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& handle = handles->at(device);
  if (handle == nullptr) RG_CUBLAS_CHECK(cublasCreate(&handle));  // on the current device
  // The math mode follows set_allow_tf32 at every call (a field write in the handle).
  RG_CUBLAS_CHECK(cublasSetMathMode(handle, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return handle;
}

int to_int(int64_t v, const char* what) {
  RG_CHECK(v >= 0 && v <= INT_MAX, "matmul", what, " = ", v, " does not fit the 32-bit int cuBLAS takes");
  return static_cast<int>(v);
}

// cuBLAS rejects a leading dimension smaller than the stored row length even when there is a single
// row and the stride is never used (a view may carry any stride on a dimension of size 1).
int64_t fix_ld(int64_t ld, int64_t stored_rows, int64_t stored_cols) {
  return stored_rows <= 1 ? std::max<int64_t>({ld, stored_cols, 1}) : ld;
}

// The arguments cuBLAS gets for a row-major product: the swapped sizes (cm = n, cn = m), each
// leading dimension checked to fit an int, and the transpose flags.
struct ColumnMajorCall {
  int cm, cn, ck, lda, ldb, ldc;
  cublasOperation_t op_a, op_b;
};
ColumnMajorCall column_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                             int64_t ldc) {
  lda = fix_ld(lda, trans_a ? k : m, trans_a ? m : k);
  ldb = fix_ld(ldb, trans_b ? n : k, trans_b ? k : n);
  ldc = fix_ld(ldc, m, n);
  return {to_int(n, "n"),
          to_int(m, "m"),
          to_int(k, "k"),
          to_int(lda, "lda"),
          to_int(ldb, "ldb"),
          to_int(ldc, "ldc"),
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
          trans_b ? CUBLAS_OP_T : CUBLAS_OP_N};
}

}  // namespace

// a: (m, k) row-major, or (k, m) when trans_a; b: (k, n), or (n, k) when trans_b; c: (m, n).
void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
          int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const auto [cm, cn, ck, clda, cldb, cldc, op_a, op_b] = column_major(trans_a, trans_b, m, n, k, lda, ldb, ldc);

  const int device = device_of(c);
  DeviceGuard guard(device);
  cublasHandle_t handle = handle_for(device);
  switch (dtype) {
    case DType::f32: {
      const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
      RG_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, cm, cn, ck, &fa, static_cast<const float*>(b), cldb,
                                  static_cast<const float*>(a), clda, &fb, static_cast<float*>(c), cldc));
      break;
    }
    case DType::f64:
      RG_CUBLAS_CHECK(cublasDgemm(handle, op_b, op_a, cm, cn, ck, &alpha, static_cast<const double*>(b), cldb,
                                  static_cast<const double*>(a), clda, &beta, static_cast<double*>(c), cldc));
      break;
    case DType::f16:
    case DType::bf16: {
      const cudaDataType_t type = dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
      const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);  // f32 compute
      RG_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, cm, cn, ck, &fa, b, type, cldb, a, type, clda, &fb, c, type,
                                   cldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      break;
    }
    default: RG_FAIL("matmul", "no CUDA gemm for dtype ", dtype_name(dtype), " (f32, f64, f16 and bf16 are supported)");
  }
}

// The same product for `batch` matrices at fixed element strides (attention's heads): one cuBLAS
// call instead of `batch`, with the same row-major-to-column-major swap as gemm.
void gemm_strided_batched(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                          double beta, void* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const auto [cm, cn, ck, clda, cldb, cldc, op_a, op_b] = column_major(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  const int count = to_int(batch, "batch");

  const int device = device_of(c);
  DeviceGuard guard(device);
  cublasHandle_t handle = handle_for(device);
  switch (dtype) {
    case DType::f32: {
      const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
      RG_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, cm, cn, ck, &fa, static_cast<const float*>(b), cldb,
                                                stride_b, static_cast<const float*>(a), clda, stride_a, &fb,
                                                static_cast<float*>(c), cldc, stride_c, count));
      break;
    }
    case DType::f64:
      RG_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, op_b, op_a, cm, cn, ck, &alpha, static_cast<const double*>(b),
                                                cldb, stride_b, static_cast<const double*>(a), clda, stride_a, &beta,
                                                static_cast<double*>(c), cldc, stride_c, count));
      break;
    case DType::f16:
    case DType::bf16: {
      const cudaDataType_t type = dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
      const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
      RG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, cm, cn, ck, &fa, b, type, cldb, stride_b, a, type,
                                                 clda, stride_a, &fb, c, type, cldc, stride_c, count,
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      break;
    }
    default:
      RG_FAIL("bmm", "no CUDA batched gemm for dtype ", dtype_name(dtype), " (f32, f64, f16 and bf16 are supported)");
  }
}

}  // namespace ringgrad::cuda
