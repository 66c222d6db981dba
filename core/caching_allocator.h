// The size-class cache both device allocators are built on. Freed blocks go to per-size-class free
// lists and are handed out again, so a loop that allocates the same sizes every step stops calling
// the OS (or the CUDA driver) after its first step. A backend only says how to get and return memory.
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace ringgrad {

class CachingAllocator : public Allocator {
 public:
  void* allocate(size_t nbytes) final;
  void deallocate(void* ptr, size_t nbytes) final;
  MemoryStats stats() const final;
  void reset_peak_stats() final;
  void empty_cache() final;

 protected:
  // Gets `size` bytes (a size class) from the OS / driver, or throws. Called with the lock held; it
  // may call release_cached() and retry when memory runs out.
  virtual void* system_allocate(size_t size) = 0;
  virtual void system_free(void* ptr, size_t size) = 0;
  // Returns every cached free block to the system. Called with the lock held.
  void release_cached();
  // Called with the lock held, e.g. to describe the state in an out-of-memory message.
  const MemoryStats& locked_stats() const { return stats_; }
  // Stream awareness (the CUDA allocator; Note [Streams and block reuse] in core/cuda/allocator.cu).
  // A backend may keep a freed block out of the cache until the device is done with it: defer_free
  // returns true when it takes the block, and the backend hands it back with make_reusable from
  // reclaim_deferred, which runs before every allocation (wait = false: only what is done) and before
  // the cache is emptied (wait = true). All three run with the lock held.
  virtual bool defer_free(void* /*ptr*/, size_t /*size*/) { return false; }
  virtual void reclaim_deferred(bool /*wait*/) {}
  void make_reusable(void* ptr, size_t size) { free_blocks_[size].push_back(ptr); }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // size class -> free blocks
  MemoryStats stats_;
};

}  // namespace ringgrad
