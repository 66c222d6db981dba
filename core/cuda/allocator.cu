// The CUDA caching allocator: one per device, the size-class cache of core/caching_allocator.h over
// cudaMalloc / cudaFree, which are slow and synchronise the whole device; a training loop that
// allocates the same sizes every step stops calling them after its first step. The cache logic and
// the stats are the CPU allocator's, so the two report comparable numbers.
//
// Not stream-aware yet: a freed block may be handed out again at once. That is safe only because
// every kernel and copy of the CUDA backend runs on the legacy default stream, in issue order, so
// the next user's kernels run after the previous user's. When work moves to other streams (e.g. a
// communication stream), a block must remember the streams that used it and be reused only after
// they have passed that point (PyTorch's recordStream), a later issue.
#include <memory>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

class CachingCudaAllocator final : public CachingAllocator {
 public:
  explicit CachingCudaAllocator(int device) : device_(device) {}

 protected:
  // Blocks are 256-byte aligned (cudaMalloc's guarantee), more than the 64 bytes asked of allocators.
  // On out-of-memory, returns the cached blocks to the driver and tries once more: the cache may hold
  // enough memory in blocks of the wrong sizes.
  void* system_allocate(size_t size) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      RG_FAIL("cuda allocator", "out of memory allocating ", size, " bytes on cuda:", device_, " (",
              locked_stats().allocated, " bytes allocated by ringgrad, ", free_bytes, " of ", total_bytes,
              " bytes free on the device). Reduce the batch size or model, or check for tensors "
              "kept alive by mistake (memory_stats(Device::cuda()).peak_allocated).");
    }
    RG_CUDA_CHECK(err);
    return ptr;
  }

  void system_free(void* ptr, size_t) override {
    DeviceGuard guard(device_);
    RG_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  const int device_;
};

}  // namespace

Allocator& allocator(int device) {
  const int count = device_count();
  RG_CHECK(device >= 0 && device < count, "cuda allocator", "device cuda:", device, " requested, but ",
           count, " CUDA device(s) are visible", count == 0 ? " (no driver or no GPU on this machine)" : "");
  // Deliberately leaked, like the CPU allocator: storages destroyed during static destruction still
  // need theirs, and calling cudaFree after the runtime has shut down fails. The driver reclaims the
  // cached blocks when the process exits.
  static auto* allocators = [count] {
    auto* all = new std::vector<std::unique_ptr<CachingCudaAllocator>>();
    for (int d = 0; d < count; ++d) all->push_back(std::make_unique<CachingCudaAllocator>(d));
    return all;
  }();
  return *(*allocators)[device];
}

}  // namespace ringgrad::cuda
