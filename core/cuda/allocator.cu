// The CUDA caching allocator: one per device. Freed blocks go to per-size-class free lists and are
// handed out again, because cudaMalloc and cudaFree are slow and synchronise the whole device; a
// training loop that allocates the same sizes every step stops calling them after its first step.
// Size classes are the CPU allocator's (allocation_size_class), so the two report comparable stats.
//
// Not stream-aware yet: a freed block may be handed out again at once. That is safe only because
// every kernel and copy of the CUDA backend runs on the legacy default stream, in issue order, so
// the next user's kernels run after the previous user's. When work moves to other streams (e.g. a
// communication stream), a block must remember the streams that used it and be reused only after
// they have passed that point (PyTorch's recordStream), a later issue.
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

class CachingCudaAllocator final : public Allocator {
 public:
  explicit CachingCudaAllocator(int device) : device_(device) {}

  // Blocks are 256-byte aligned (cudaMalloc's guarantee), more than the 64 bytes asked of allocators.
  // Like the CPU allocator, a 0-byte request gets the smallest class, so it never returns nullptr.
  void* allocate(size_t nbytes) override {
    const size_t size = allocation_size_class(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
    } else {
      ptr = malloc_from_driver(size);
    }
    stats_.allocated += size;
    if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const size_t size = allocation_size_class(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated -= size;
    free_blocks_[size].push_back(ptr);
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated = stats_.allocated;
    stats_.os_allocations = 0;
    stats_.os_frees = 0;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    free_cached_blocks();
  }

 private:
  // Called with mutex_ held. On out-of-memory, returns the cached blocks to the driver and tries once
  // more: the cache may hold enough memory in blocks of the wrong sizes.
  void* malloc_from_driver(size_t size) {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      free_cached_blocks();
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      RG_FAIL("cuda allocator", "out of memory allocating ", size, " bytes on cuda:", device_, " (",
              stats_.allocated, " bytes allocated by ringgrad, ", free_bytes, " of ", total_bytes,
              " bytes free on the device). Reduce the batch size or model, or check for tensors "
              "kept alive by mistake (memory_stats(Device::cuda()).peak_allocated).");
    }
    RG_CUDA_CHECK(err);
    stats_.reserved += size;
    stats_.os_allocations++;
    return ptr;
  }

  // Called with mutex_ held.
  void free_cached_blocks() {
    DeviceGuard guard(device_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* p : blocks) {
        RG_CUDA_CHECK(cudaFree(p));
        stats_.reserved -= size;
        stats_.os_frees++;
      }
      blocks.clear();
    }
  }

  const int device_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // size class -> free blocks
  MemoryStats stats_;
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
