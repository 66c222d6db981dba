// Launch helpers shared by the CUDA kernels of core/cuda/ (internal): grid sizes, warp reductions,
// a typed dispatch over the compute dtypes, and device scratch memory.
//
// Row kernels use one warp per row: the 32 lanes read consecutive elements (coalesced), fold them
// into per-lane partials and combine those with shuffles. Every lane of a warp walks the same rows,
// so the shuffles are always reached by the whole warp. Rows here are short (a vocabulary, n_embd,
// a sequence), so a warp per row keeps every multiprocessor busy without a block-wide reduction.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ringgrad::cuda::detail {

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;
inline constexpr int kWarpsPerBlock = kThreads / kWarp;
// Grid-stride loops cover anything beyond this many blocks.
inline constexpr int64_t kMaxBlocks = 65535;

// Blocks for one thread per item.
inline unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}
// Blocks for one warp per row.
inline unsigned blocks_for_rows(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, kMaxBlocks));
}

#ifdef __CUDACC__
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}
// The first row of this warp and the distance to its next one (grid-stride over rows).
__device__ __forceinline__ int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
}
__device__ __forceinline__ int64_t warp_row_stride() { return static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp); }
__device__ __forceinline__ int64_t first_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
#endif

// Calls fn(float{}) or fn(double{}): the kernels that compute in the front ends' compute dtype.
template <class Fn>
void dispatch_compute(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    default: RG_FAIL(op, "the CUDA kernel computes in f32 or f64, got ", dtype_name(dtype));
  }
}

// Device memory for one call's temporaries, from the device's caching allocator. Freed blocks are
// reused at once (the allocator is not stream-aware), which is safe because every kernel of this
// backend runs on the legacy default stream, in issue order.
class Scratch {
 public:
  Scratch(Allocator& allocator, size_t bytes) : allocator_(allocator), bytes_(bytes), ptr_(allocator.allocate(bytes)) {}
  ~Scratch() { allocator_.deallocate(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Allocator& allocator_;
  size_t bytes_;
  void* ptr_;
};

// After a launch: a bad configuration is reported here, naming the op.
#define RG_CUDA_CHECK_LAUNCH() RG_CUDA_CHECK(cudaGetLastError())

}  // namespace ringgrad::cuda::detail
