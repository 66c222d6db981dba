// Where a tensor's bytes live. Every tensor carries one; the backend seam (core/native/backend.h) picks
// each op's kernel by it.
#pragma once

#include <cstdint>
#include <string>

namespace ringgrad {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // "cpu" or "cuda", without the index: what ranks that each drive their own GPU have in common.
  const char* kind() const { return is_cpu() ? "cpu" : "cuda"; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// True when this build has the CUDA backend compiled in (RINGGRAD_CUDA).
bool cuda_compiled();
// Number of CUDA devices visible; 0 without CUDA support or without a device.
int cuda_device_count();

// A device named on a command line: "cpu", "cuda:N", or "cuda" -- the GPU of this process's local
// rank (local_rank modulo the visible devices, Horovod's convention: one GPU per rank on a machine).
// An unknown name, or a GPU that is not there, is an error saying what is visible.
Device parse_device(const std::string& spec, int local_rank = 0);

// Chooses this process's GPU for its local rank (local_rank modulo the visible devices): the device
// every thread makes current before its first CUDA call, so that a rank on cuda:3 opens no context on
// cuda:0 (Note [The home device], core/cuda/device.cu). dist::init calls it; it opens no context
// itself, and does nothing without CUDA or without a visible device.
void select_local_device(int local_rank);

// Opt-in TF32 for f32 matrix products and convolutions on GPUs that have it (A100 and later): inputs
// rounded to 10 mantissa bits on tensor cores, several times faster, ~1e-3 relative error. Off by
// default (f32 means f32), like PyTorch's torch.backends.cuda.matmul.allow_tf32 since 1.12.
// Process-wide; no effect on the CPU.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace ringgrad
