#include "core/allocator.h"

#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad {

size_t allocation_size_class(size_t nbytes) {
  constexpr size_t kAlign = 64;
  if (nbytes <= 4096) return nbytes == 0 ? kAlign : (nbytes + kAlign - 1) / kAlign * kAlign;
  // Four classes per power of two: for 2^k < n <= 2^(k+1) the step is 2^k / 4. Above 2^62 bytes no
  // machine has the memory, and the doubling below would never end (it wraps to zero).
  RG_CHECK(nbytes <= (size_t{1} << 62), "allocator", "a request of ", nbytes, " bytes exceeds 2^62 bytes");
  size_t power = 1;
  while (power * 2 < nbytes) power *= 2;
  const size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu::allocator();
#ifdef RINGGRAD_WITH_CUDA
  return cuda::allocator(device.index);
#else
  RG_FAIL("allocator", "device ", device.str(),
          " requested, but ringgrad was built without CUDA "
          "(configure with -DRINGGRAD_CUDA=ON on a machine with the CUDA toolkit)");
#endif
}

MemoryStats memory_stats(Device device) { return allocator_for(device).stats(); }
void reset_peak_memory_stats(Device device) { allocator_for(device).reset_peak_stats(); }
void empty_cache(Device device) { allocator_for(device).empty_cache(); }

}  // namespace ringgrad
