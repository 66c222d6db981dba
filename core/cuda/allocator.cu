// The CUDA caching allocator: one per device, the size-class cache of core/caching_allocator.h over
// cudaMalloc / cudaFree, which are slow and synchronise the whole device; a training loop that
// allocates the same sizes every step stops calling them after its first step. The cache logic and
// the stats are the CPU allocator's, so the two report comparable numbers.
//
// Note [Streams and block reuse]: a freed block is handed out again at once, to kernels the host
// launches next -- safe on the legacy default stream, where every kernel and copy of the backend
// runs in issue order, so the next user's kernels run after the previous user's. A block that
// another stream used (the nccl group's communication stream) may still be read or written there
// after the host frees it. record_stream(tensor, stream) says so (PyTorch's Tensor.record_stream):
// when such a block is freed, an event is recorded on each stream that used it, and the block stays
// out of the cache -- counted as reserved, not allocated -- until every event has passed. Pending
// blocks are checked (cudaEventQuery, no waiting) before each allocation, and waited for before the
// cache is emptied or when memory runs out. A stream's owner calls forget_stream before destroying
// it (tensors it touched may be freed later, and an event cannot be recorded on a dead stream).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/cuda/streams.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

class CachingCudaAllocator final : public CachingAllocator {
 public:
  explicit CachingCudaAllocator(int device) : device_(device) {}

  // Note [Streams and block reuse]: `stream` uses the block at `block` (a pointer allocate returned).
  void record_stream(void* block, cudaStream_t stream) {
    if (stream == nullptr || stream == cudaStreamLegacy) return;  // the default stream: issue order suffices
    std::lock_guard lock(uses_mutex_);
    auto& streams = stream_uses_[block];
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  }

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
      reclaim_deferred(/*wait=*/true);
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
    note_device_block(ptr, size, device_);  // Note [Finding a pointer's device]
    return ptr;
  }

  void system_free(void* ptr, size_t) override {
    DeviceGuard guard(device_);
    forget_device_block(ptr);
    RG_CUDA_CHECK(cudaFree(ptr));
  }

  // Runs inside deallocate (a Storage's destructor), so it never throws: if an event cannot be
  // recorded, it waits for the streams instead and lets the block be cached at once.
  bool defer_free(void* ptr, size_t size) override {
    std::vector<cudaStream_t> streams;
    {
      std::lock_guard lock(uses_mutex_);
      auto it = stream_uses_.find(ptr);
      if (it == stream_uses_.end()) return false;
      streams = std::move(it->second);
      stream_uses_.erase(it);
    }
    DeviceGuard guard(device_);
    Deferred deferred{ptr, size, {}};
    bool recorded = true;
    for (cudaStream_t stream : streams) {
      cudaEvent_t event = nullptr;
      if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
        recorded = false;
        break;
      }
      deferred.events.push_back(event);
      if (cudaEventRecord(event, stream) != cudaSuccess) {
        recorded = false;
        break;
      }
    }
    if (!recorded) {
      (void)cudaGetLastError();
      for (cudaEvent_t event : deferred.events) (void)cudaEventDestroy(event);
      for (cudaStream_t stream : streams) (void)cudaStreamSynchronize(stream);
      return false;
    }
    deferred_.push_back(std::move(deferred));
    return true;
  }

  void reclaim_deferred(bool wait) override {
    if (deferred_.empty()) return;
    DeviceGuard guard(device_);
    // Decide first, then move: nothing below throws once a block is being handed back.
    std::vector<char> passed(deferred_.size(), 1);
    for (size_t i = 0; i < deferred_.size(); ++i)
      for (cudaEvent_t event : deferred_[i].events) {
        const cudaError_t state = wait ? cudaEventSynchronize(event) : cudaEventQuery(event);
        if (state == cudaErrorNotReady) {
          passed[i] = 0;
          break;
        }
        RG_CUDA_CHECK(state);
      }
    std::vector<Deferred> still_waiting;
    for (size_t i = 0; i < deferred_.size(); ++i) {
      if (!passed[i]) {
        still_waiting.push_back(std::move(deferred_[i]));
        continue;
      }
      for (cudaEvent_t event : deferred_[i].events) (void)cudaEventDestroy(event);
      make_reusable(deferred_[i].ptr, deferred_[i].size);
    }
    deferred_ = std::move(still_waiting);
  }

 public:
  // The stream is about to be destroyed: wait for it, then drop it from every live block's record,
  // so no later free records an event on a dead stream.
  void forget_stream(cudaStream_t stream) {
    {
      DeviceGuard guard(device_);
      (void)cudaStreamSynchronize(stream);  // a failure here changes nothing below: drop it anyway
    }
    std::lock_guard lock(uses_mutex_);
    for (auto it = stream_uses_.begin(); it != stream_uses_.end();) {
      std::erase(it->second, stream);
      it = it->second.empty() ? stream_uses_.erase(it) : std::next(it);
    }
  }

 private:
  struct Deferred {
    void* ptr;
    size_t size;
    std::vector<cudaEvent_t> events;  // one per stream that used the block, recorded when it was freed
  };
  const int device_;
  std::mutex uses_mutex_;                                             // record_stream runs without the cache's lock
  std::unordered_map<void*, std::vector<cudaStream_t>> stream_uses_;  // live blocks other streams used
  std::vector<Deferred> deferred_;  // freed, waiting for their streams (guarded by the cache's lock)
};

CachingCudaAllocator& caching_allocator(int device);

}  // namespace

void record_stream(const Tensor& t, cudaStream_t stream) {
  RG_CHECK(t.defined() && t.device().is_cuda(), "record_stream", "needs a CUDA tensor, got ",
           t.defined() ? t.desc() : std::string("an undefined tensor"));
  caching_allocator(t.device().index).record_stream(t.storage()->data(), stream);
}

void forget_stream(int device, cudaStream_t stream) { caching_allocator(device).forget_stream(stream); }

Allocator& allocator(int device) { return caching_allocator(device); }

namespace {

CachingCudaAllocator& caching_allocator(int device) {
  const int count = device_count();
  RG_CHECK(device >= 0 && device < count, "cuda allocator", "device cuda:", device, " requested, but ", count,
           " CUDA device(s) are visible", count == 0 ? " (no driver or no GPU on this machine)" : "");
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

}  // namespace
}  // namespace ringgrad::cuda
