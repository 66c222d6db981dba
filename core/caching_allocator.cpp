#include "core/caching_allocator.h"

namespace ringgrad {

void* CachingAllocator::allocate(size_t nbytes) {
  const size_t size = allocation_size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  reclaim_deferred(/*wait=*/false);
  void* ptr = nullptr;
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    ptr = system_allocate(size);
    stats_.reserved += size;
    stats_.os_allocations++;
  }
  stats_.allocated += size;
  if (stats_.allocated > stats_.peak_allocated) stats_.peak_allocated = stats_.allocated;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  const size_t size = allocation_size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocated -= size;
  if (!defer_free(ptr, size)) free_blocks_[size].push_back(ptr);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.os_allocations = 0;
  stats_.os_frees = 0;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  reclaim_deferred(/*wait=*/true);
  release_cached();
}

void CachingAllocator::release_cached() {
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) {
      system_free(p, size);
      stats_.reserved -= size;
      stats_.os_frees++;
    }
    blocks.clear();
  }
}

}  // namespace ringgrad
