// Check macros for CUDA runtime and cuBLAS calls (internal to core/cuda/).
//
//   RG_CUDA_CHECK(cudaMalloc(&ptr, n));
//   RG_CUBLAS_CHECK(cublasSgemm(handle, ...));
//   RG_CUDNN_CHECK(cudnnConvolutionForward(handle, ...));
//
// A failing call throws ringgrad::Error naming the statement, the error, the current device and
// file:line, e.g.
//   [cuda] cudaMalloc(&ptr, size) failed: out of memory (cudaErrorMemoryAllocation) on cuda:0
//   at core/cuda/allocator.cu:61
// After a kernel launch, RG_CUDA_CHECK(cudaGetLastError()) reports a bad launch configuration.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "core/error.h"

namespace ringgrad::cuda::detail {

// "cuda:N" for the calling thread's current device, or "cuda:?" when even that query fails (for
// instance after a sticky error has broken the context).
inline std::string current_device_str() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cuda:?";
  }
  return "cuda:" + std::to_string(device);
}

// The text after "[cuda] ... failed: <error>": the device, the rank in a distributed job (set by
// dist::init) and file:line. Every CUDA, cuBLAS, cuDNN and NCCL error passes through here.
inline std::string error_location(const char* file, int line) {
  const std::string& rank = rank_label();
  return ringgrad::str_cat(" on ", current_device_str(), rank.empty() ? "" : ", ", rank, " at ", file, ":", line);
}

[[noreturn]] inline void throw_cuda_error(const char* stmt, cudaError_t err, const char* file, int line) {
  // Runtime calls also record their error as the thread's "last error"; clear it so that a later
  // RG_CUDA_CHECK(cudaGetLastError()) does not report this one a second time.
  (void)cudaGetLastError();
  throw Error(str_cat("[cuda] ", stmt, " failed: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ")",
                      error_location(file, line)));
}

[[noreturn]] inline void throw_cublas_error(const char* stmt, cublasStatus_t status, const char* file, int line) {
  throw Error(str_cat("[cublas] ", stmt, " failed: ", cublasGetStatusString(status), " (", cublasGetStatusName(status),
                      ")", error_location(file, line)));
}

[[noreturn]] inline void throw_cudnn_error(const char* stmt, cudnnStatus_t status, const char* file, int line) {
  throw Error(str_cat("[cudnn] ", stmt, " failed: ", cudnnGetErrorString(status), " (status ", static_cast<int>(status),
                      ")", error_location(file, line)));
}

}  // namespace ringgrad::cuda::detail

#define RG_CUDA_CHECK(stmt)                                                                \
  do {                                                                                     \
    const cudaError_t rg_cuda_err_ = (stmt);                                               \
    if (rg_cuda_err_ != cudaSuccess)                                                       \
      ::ringgrad::cuda::detail::throw_cuda_error(#stmt, rg_cuda_err_, __FILE__, __LINE__); \
  } while (0)

#define RG_CUBLAS_CHECK(stmt)                                                                     \
  do {                                                                                            \
    const cublasStatus_t rg_cublas_status_ = (stmt);                                              \
    if (rg_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::ringgrad::cuda::detail::throw_cublas_error(#stmt, rg_cublas_status_, __FILE__, __LINE__); \
  } while (0)

#define RG_CUDNN_CHECK(stmt)                                                                    \
  do {                                                                                          \
    const cudnnStatus_t rg_cudnn_status_ = (stmt);                                              \
    if (rg_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                               \
      ::ringgrad::cuda::detail::throw_cudnn_error(#stmt, rg_cudnn_status_, __FILE__, __LINE__); \
  } while (0)
