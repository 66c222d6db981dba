// Device discovery, device selection and byte copies between host and devices.
#include "core/cuda/device.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "core/cuda/check.h"
#include "core/cuda/device_checks.h"
#include "core/kernels.h"

namespace ringgrad {

namespace cuda {

int device_count() {
  // Counted once: the answer cannot change while the process runs (CUDA_VISIBLE_DEVICES is read at
  // driver initialisation), and without a driver each query would try to load it again.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      // No driver, no device, or a driver older than the runtime: CUDA is simply not available.
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

// Note [The home device]
// A thread's current CUDA device starts as device 0, and since CUDA 12 making a device current
// creates its context (~500 MB). So a DeviceGuard on a thread that never chose a device would, on
// restoring "the previous device", open a context on GPU 0 in every rank of a multi-GPU machine --
// the main thread, the communication thread and the data loader's worker alike. Instead each thread,
// at its first DeviceGuard, makes the process's home device current (the local rank's GPU, chosen by
// dist::init, or the one parse_device named), and guards restore to that. A process that never
// touches a GPU never constructs a guard, so it opens no context at all.
namespace {
std::atomic<int> g_home_device{-1};  // -1: none chosen yet
}  // namespace

void set_home_device(int device) { g_home_device.store(device, std::memory_order_relaxed); }
int home_device() { return std::max(0, g_home_device.load(std::memory_order_relaxed)); }

DeviceGuard::DeviceGuard(int device) {
  thread_local bool entered_home = false;
  if (!entered_home) {
    entered_home = true;
    const int home = g_home_device.load(std::memory_order_relaxed);
    // Even when home == device: a thread's current device is 0 until set, and the guard must
    // restore to home, not to 0.
    if (home >= 0) RG_CUDA_CHECK(cudaSetDevice(home));
  }
  // One visible device: it is current already (the home device, or device 0 by default), so the
  // guard costs no runtime call at all -- every kernel launch constructs one.
  if (device_count() == 1) return;
  int current = 0;
  RG_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    RG_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was valid a moment ago does not fail.
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

// Note [Finding a pointer's device]: every CUDA entry point finds the device of its output pointer
// (core/cuda/device.h). cudaPointerGetAttributes answers, but it is a driver call on every kernel
// launch; the caching allocator already knows where each of its blocks lives, so it registers them
// here (a handful of large blocks: the cache keeps them for the whole run) and the lookup is a
// shared lock and a map search. A pointer outside every registered block falls back to the driver.
namespace {
struct DeviceBlock {
  uintptr_t end;
  int device;
};
struct BlockTable {
  std::shared_mutex mutex;
  std::map<uintptr_t, DeviceBlock> by_start;
};
BlockTable& block_table() {
  static auto* table = new BlockTable();  // leaked: blocks are freed during static destruction
  return *table;
}
}  // namespace

void note_device_block(const void* ptr, size_t bytes, int device) {
  BlockTable& table = block_table();
  std::unique_lock lock(table.mutex);
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  table.by_start[start] = DeviceBlock{start + bytes, device};
}

void forget_device_block(const void* ptr) {
  BlockTable& table = block_table();
  std::unique_lock lock(table.mutex);
  table.by_start.erase(reinterpret_cast<uintptr_t>(ptr));
}

int device_of(const void* ptr) {
  {
    BlockTable& table = block_table();
    std::shared_lock lock(table.mutex);
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = table.by_start.upper_bound(address);  // the first block starting after ptr
    if (it != table.by_start.begin() && address < std::prev(it)->second.end) return std::prev(it)->second.device;
  }
  cudaPointerAttributes attributes{};
  RG_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  RG_CHECK(attributes.type == cudaMemoryTypeDevice, "cuda", "pointer ", ptr,
           " is not CUDA device memory (a CPU tensor handed to a CUDA kernel?)");
  return attributes.device;
}

// Synchronous unless asked otherwise: when this returns, dst holds the bytes and src may be reused
// or freed. Copies to and from pageable host memory are synchronous in CUDA already; device-to-device
// copies are not, hence the explicit synchronisation. The one asynchronous case: non_blocking from
// pinned memory.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, bool non_blocking,
                bool src_pinned) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  if (src_device.is_cpu() && non_blocking && src_pinned) {
    // DMA from pinned memory, queued on the default stream: kernels launched later read dst after
    // it lands; the pinned block is kept until then (core/cuda/pinned.cu).
    DeviceGuard guard(dst_device.index);
    pinned_note_use(src, dst_device.index);  // Note [Pinned blocks and their copies]
    RG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, cudaStreamLegacy));
  } else if (src_device.is_cpu()) {
    DeviceGuard guard(dst_device.index);
    RG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
  } else if (dst_device.is_cpu()) {
    DeviceGuard guard(src_device.index);
    RG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
    // The kernels queued before the copy have finished: what they found is raised now (Note
    // [Device-side index checks]).
    raise_bad_index(src_device.index);
  } else if (dst_device.index == src_device.index) {
    DeviceGuard guard(dst_device.index);
    RG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToDevice));
    RG_CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    // Between two devices; goes through the host when peer access is not enabled.
    DeviceGuard guard(dst_device.index);
    RG_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, nbytes));
    RG_CUDA_CHECK(cudaDeviceSynchronize());
  }
}

}  // namespace cuda

// The CUDA-enabled definitions of core/device.h (core/device.cpp has the CPU-only ones).
bool cuda_compiled() { return true; }
int cuda_device_count() { return cuda::device_count(); }

}  // namespace ringgrad
