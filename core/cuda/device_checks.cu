// The host side of Note [Device-side index checks] (core/cuda/device_checks.h): each device's record,
// and the error raised from it.
#include "core/cuda/device_checks.h"

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device.h"
#include "core/env.h"
#include "core/kernels.h"

namespace ringgrad::cuda {
namespace {

const char* op_name(int op) {
  switch (static_cast<IndexCheck>(op)) {
    case IndexCheck::index_select: return "index_select";
    case IndexCheck::index_add: return "index_add";
    case IndexCheck::gather: return "gather";
    case IndexCheck::scatter_add: return "scatter_add";
    case IndexCheck::one_hot: return "one_hot";
    case IndexCheck::cross_entropy: return "cross_entropy";
    case IndexCheck::none: break;
  }
  return "index check";
}

// One sink per device, made at first use and never freed (like the allocators: kernels may still
// write to it while the process shuts down).
struct Sinks {
  std::mutex mutex;
  std::vector<BadIndexSink> of_device;
};
Sinks& sinks() {
  static auto* all = new Sinks{{}, std::vector<BadIndexSink>(static_cast<size_t>(device_count()), {nullptr, nullptr})};
  return *all;
}

}  // namespace

BadIndexSink bad_index_sink(int device) {
  Sinks& all = sinks();
  std::lock_guard lock(all.mutex);
  BadIndexSink& sink = all.of_device.at(static_cast<size_t>(device));
  if (sink.on_device == nullptr) {
    DeviceGuard guard(device);
    void* host = nullptr;
    RG_CUDA_CHECK(cudaHostAlloc(&host, sizeof(BadIndexRecord), cudaHostAllocMapped));
    *static_cast<BadIndexRecord*>(host) = BadIndexRecord{};
    void* on_device = nullptr;
    RG_CUDA_CHECK(cudaMalloc(&on_device, sizeof(BadIndexRecord)));
    RG_CUDA_CHECK(cudaMemset(on_device, 0, sizeof(BadIndexRecord)));
    void* host_as_seen_by_device = nullptr;
    RG_CUDA_CHECK(cudaHostGetDevicePointer(&host_as_seen_by_device, host, 0));
    sink = BadIndexSink{static_cast<BadIndexRecord*>(on_device), static_cast<BadIndexRecord*>(host_as_seen_by_device)};
    // The host reads the mapped block through its own address; with unified addressing (every
    // 64-bit platform CUDA supports) the two are the same.
    RG_CHECK(host_as_seen_by_device == host, "cuda",
             "mapped host memory has different host and device addresses on cuda:", device,
             "; the device-side index checks need unified addressing");
  }
  return sink;
}

void raise_bad_index(int device) {
  BadIndexSink sink;
  {
    Sinks& all = sinks();
    std::lock_guard lock(all.mutex);
    if (device < 0 || static_cast<size_t>(device) >= all.of_device.size()) return;
    sink = all.of_device[static_cast<size_t>(device)];
  }
  if (sink.on_host == nullptr) return;  // no checking kernel has run on this device
  volatile BadIndexRecord* host = sink.on_host;
  const int op = host->op;
  if (op == 0) return;
  const BadIndexRecord found{op, host->value, host->position, host->bound};
  // Cleared before raising, so that the next error is reported too.
  host->op = 0;
  {
    DeviceGuard guard(device);
    RG_CUDA_CHECK(cudaMemset(sink.on_device, 0, sizeof(BadIndexRecord)));
  }
  const std::string& rank = rank_label();
  const bool target = static_cast<IndexCheck>(op) == IndexCheck::cross_entropy;
  RG_FAIL(op_name(op), target ? "target" : "index", " value ", found.value, " at position ", found.position,
          target ? " is not a class index in [0, " : " is out of range [0, ", found.bound, ")",
          target ? " (nor ignore_index)" : "", " on cuda:", device, rank.empty() ? "" : ", ", rank,
          ". Found by the kernel and raised at the next synchronisation with the host, so the op ran before the "
          "line that raised this; RINGGRAD_CUDA_SYNC_CHECKS=1 raises it in the op itself (Note [Device-side index "
          "checks])");
}

void sync_check_if_asked(int device) {
  static const bool asked = env::flag("RINGGRAD_CUDA_SYNC_CHECKS", "cuda").value_or(false);
  if (!asked) return;
  {
    DeviceGuard guard(device);
    RG_CUDA_CHECK(cudaDeviceSynchronize());
  }
  raise_bad_index(device);
}

}  // namespace ringgrad::cuda
