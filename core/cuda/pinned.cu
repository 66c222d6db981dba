// Page-locked ("pinned") host memory, for asynchronous host-to-device copies.
//
// A copy from ordinary (pageable) host memory is synchronous: the driver first copies into a pinned
// bounce buffer. From pinned memory the GPU reads by DMA, so cudaMemcpyAsync returns at once and the
// copy overlaps host work (the DataLoader preparing the next batch). The catch is lifetime: the
// copy may still be reading a block after its tensor is freed. So a freed block is not reusable at
// once: release() records an event on the default stream -- after every copy issued so far -- and
// the block goes back to the size-class cache only once that event has passed (PyTorch's
// CachingHostAllocator does the same). cudaHostAlloc is slow (it pins pages), hence the cache.
#include <mutex>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

class PinnedCache final : public CachingAllocator {
 protected:
  void* system_allocate(size_t size) override {
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();
      RG_CUDA_CHECK(cudaHostAlloc(&ptr, size, cudaHostAllocDefault));
      return ptr;
    }
    RG_CUDA_CHECK(err);
    return ptr;
  }
  void system_free(void* ptr, size_t) override { RG_CUDA_CHECK(cudaFreeHost(ptr)); }
};

class PinnedPool {
 public:
  void* allocate(size_t nbytes) {
    reclaim();
    return cache_.allocate(nbytes);
  }

  void release(void* ptr, size_t nbytes) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(event, cudaStreamLegacy) != cudaSuccess) {
      // No event (the runtime is shutting down): wait for the device instead, then reuse.
      (void)cudaGetLastError();
      if (event != nullptr) cudaEventDestroy(event);
      (void)cudaDeviceSynchronize();
      cache_.deallocate(ptr, nbytes);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back({ptr, nbytes, event});
  }

  MemoryStats stats() {
    reclaim();
    return cache_.stats();
  }

 private:
  struct Pending {
    void* ptr;
    size_t nbytes;
    cudaEvent_t event;
  };

  // Blocks whose last copy has finished go back to the cache.
  void reclaim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < pending_.size();) {
      const cudaError_t state = cudaEventQuery(pending_[i].event);
      if (state == cudaErrorNotReady) {
        ++i;
        continue;
      }
      (void)cudaGetLastError();  // an error here is the copy's, reported by whoever waits on it
      cudaEventDestroy(pending_[i].event);
      cache_.deallocate(pending_[i].ptr, pending_[i].nbytes);
      pending_[i] = pending_.back();
      pending_.pop_back();
    }
  }

  PinnedCache cache_;
  std::mutex mutex_;
  std::vector<Pending> pending_;
};

// Deliberately leaked, like the device allocators: storages freed during static destruction still
// need it.
PinnedPool& pool() {
  static auto* instance = new PinnedPool();
  return *instance;
}

}  // namespace

void* pinned_allocate(size_t nbytes) { return pool().allocate(nbytes); }
void pinned_release(void* ptr, size_t nbytes) { pool().release(ptr, nbytes); }
MemoryStats pinned_memory_stats() { return pool().stats(); }

}  // namespace ringgrad::cuda
