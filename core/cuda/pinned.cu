// Page-locked ("pinned") host memory, for asynchronous host-to-device copies.
// See also Note [Pinned blocks and their copies] below.
//
// A copy from ordinary (pageable) host memory is synchronous: the driver first copies into a pinned
// bounce buffer. From pinned memory the GPU reads by DMA, so cudaMemcpyAsync returns at once and the
// copy overlaps host work (the DataLoader preparing the next batch). The catch is lifetime: the
// copy may still be reading a block after its tensor is freed. So a freed block is not reusable at
// once: release() records an event on the default stream of each GPU it was copied to -- after
// every copy issued so far -- and the block goes back to the size-class cache only once those
// events have passed (PyTorch's CachingHostAllocator does the same). cudaHostAlloc is slow (it pins pages), hence the cache.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/device.h"
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

// Note [Pinned blocks and their copies]: a block may be read by asynchronous copies to any GPU, each
// queued on that GPU's default stream. copy_bytes reports every such copy (note_use), so a released
// block waits for one event per GPU it was copied to, each recorded on that GPU. Driver calls that
// need a context (cudaHostAlloc, events without a device of their own) run on the home device --
// the GPU the program chose (parse_device) -- so a rank on cuda:3 opens no context on cuda:0.
class PinnedPool {
 public:
  void* allocate(size_t nbytes) {
    reclaim();
    DeviceGuard guard(home_device());
    void* ptr = cache_.allocate(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    live_[static_cast<char*>(ptr)] = Live{nbytes, 0};
    return ptr;
  }

  // An asynchronous copy from `ptr` (anywhere inside a live block) was queued on `device`.
  void note_use(const void* ptr, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.upper_bound(static_cast<char*>(const_cast<void*>(ptr)));
    RG_CHECK(it != live_.begin(), "pin_memory", "pointer ", ptr, " is not in a pinned block");
    --it;
    it->second.devices |= device < 64 ? uint64_t{1} << device : ~uint64_t{0};
  }

  void release(void* ptr, size_t nbytes) {
    uint64_t devices = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = live_.find(static_cast<char*>(ptr));
      if (it != live_.end()) {
        devices = it->second.devices;
        live_.erase(it);
      }
    }
    Pending pending{ptr, nbytes, {}};
    for (int device = 0; device < 64 && devices != 0; ++device) {
      if (!(devices & (uint64_t{1} << device))) continue;
      devices &= ~(uint64_t{1} << device);
      if (device >= device_count()) continue;
      DeviceGuard guard(device);
      cudaEvent_t event = nullptr;
      if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
          cudaEventRecord(event, cudaStreamLegacy) != cudaSuccess) {
        // No event (the runtime is shutting down): wait for that device instead.
        (void)cudaGetLastError();
        if (event != nullptr) cudaEventDestroy(event);
        (void)cudaDeviceSynchronize();
        continue;
      }
      pending.events.push_back({device, event});
    }
    if (pending.events.empty()) {  // never copied asynchronously (or already waited for)
      cache_.deallocate(ptr, nbytes);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(pending));
  }

  MemoryStats stats() {
    reclaim();
    return cache_.stats();
  }

 private:
  struct Live {
    size_t nbytes;
    uint64_t devices;  // bit d: an asynchronous copy to cuda:d read this block
  };
  struct DeviceEvent {
    int device;
    cudaEvent_t event;
  };
  struct Pending {
    void* ptr;
    size_t nbytes;
    std::vector<DeviceEvent> events;
  };

  // Blocks whose copies have all finished go back to the cache.
  void reclaim() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      bool done = true;
      for (const DeviceEvent& e : p.events) {
        DeviceGuard guard(e.device);
        const cudaError_t state = cudaEventQuery(e.event);
        if (state == cudaErrorNotReady) {
          done = false;
          break;
        }
        (void)cudaGetLastError();  // an error here is the copy's, reported by whoever waits on it
      }
      if (!done) {
        ++i;
        continue;
      }
      for (const DeviceEvent& e : p.events) {
        DeviceGuard guard(e.device);
        cudaEventDestroy(e.event);
      }
      cache_.deallocate(p.ptr, p.nbytes);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    }
  }

  PinnedCache cache_;
  std::mutex mutex_;
  std::map<char*, Live> live_;
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
void pinned_note_use(const void* ptr, int device) { pool().note_use(ptr, device); }
void pinned_release(void* ptr, size_t nbytes) { pool().release(ptr, nbytes); }
MemoryStats pinned_memory_stats() { return pool().stats(); }

}  // namespace ringgrad::cuda
