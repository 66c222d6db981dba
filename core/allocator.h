// Per-device allocators and their statistics.
//
// Every tensor's storage comes from the allocator of its device. The CPU allocator caches freed
// blocks by size class so that a training step in steady state makes no new OS allocations: a fresh
// multi-megabyte malloc/free per step costs page faults (the kernel zeroes every new page), which
// shows up as a large fraction of a small model's step time. The CUDA allocator (core/cuda/) does
// the same for cudaMalloc, which also synchronises the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace ringgrad {

struct MemoryStats {
  size_t allocated = 0;         // bytes handed out to live storages now (size-class rounded)
  size_t reserved = 0;          // bytes held from the OS / driver: allocated + cached free blocks
  size_t peak_allocated = 0;    // highest `allocated` since the last reset_peak
  uint64_t os_allocations = 0;  // calls to the OS / driver allocator since the last reset
  uint64_t os_frees = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;  // 64-byte aligned; nbytes may be 0
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak_stats() = 0;  // peak := allocated, OS call counters := 0
  virtual void empty_cache() = 0;       // return cached free blocks to the OS
};

// The allocator that owns memory for `device`. The allocators live as long as the program (they are
// the one registry a framework cannot avoid: storages freed at exit still need theirs).
Allocator& allocator_for(Device device);

MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
void empty_cache(Device device);

// Rounds a request up to its size class: 64-byte multiples up to 4 KiB, then four classes per power
// of two (at most 25% slack), so blocks are reused across slightly different sizes.
size_t allocation_size_class(size_t nbytes);

}  // namespace ringgrad
