// The CPU allocator: the size-class cache of core/caching_allocator.h over aligned_alloc. Blocks are
// 64-byte aligned (a cache line; also what AVX-512 loads like).
#include <cstdlib>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad::cpu {
namespace {

class CachingCpuAllocator final : public CachingAllocator {
 protected:
  void* system_allocate(size_t size) override {
    void* ptr = std::aligned_alloc(64, size);  // size classes are multiples of 64
    if (ptr == nullptr) {
      release_cached();
      ptr = std::aligned_alloc(64, size);
    }
    RG_CHECK(ptr != nullptr, "cpu allocator", "out of memory allocating ", size, " bytes (", locked_stats().allocated,
             " bytes allocated by ringgrad)");
    return ptr;
  }
  void system_free(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace

Allocator& allocator() {
  // Deliberately leaked: storages destroyed during static destruction still need it.
  static auto* instance = new CachingCpuAllocator();
  return *instance;
}

}  // namespace ringgrad::cpu
