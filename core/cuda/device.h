// Device selection helpers for the CUDA backend (internal to core/cuda/).
//
// CUDA runtime calls and kernel launches act on the calling thread's *current* device. The kernel
// interface (core/kernels.h) passes raw pointers only, so each CUDA entry point finds the device
// that owns its output pointer and makes it current for the call with a DeviceGuard.
#pragma once

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

// The device that owns `ptr`, a pointer returned by cudaMalloc (or into such a block).
int device_of(const void* ptr);

}  // namespace ringgrad::cuda
