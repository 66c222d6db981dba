// Device selection helpers for the CUDA backend (internal to core/cuda/).
//
// CUDA runtime calls and kernel launches act on the calling thread's *current* device. The kernel
// interface (core/kernels.h) passes raw pointers only, so each CUDA entry point finds the device
// that owns its output pointer and makes it current for the call with a DeviceGuard.
#pragma once

#include <cstddef>

namespace ringgrad::cuda {

// Makes `device` current for the guard's scope and restores the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

// The device that owns `ptr`, a pointer returned by cudaMalloc (or into such a block). Blocks of
// ringgrad's allocators are found in a table (note_device_block), without a driver call; other
// device memory (from_blob over a foreign pointer) is asked of the driver.
int device_of(const void* ptr);

// The caching allocator tells device_of about each block it gets from and returns to the driver.
void note_device_block(const void* ptr, size_t bytes, int device);
void forget_device_block(const void* ptr);

}  // namespace ringgrad::cuda
