#include "core/device.h"

#include <atomic>

#include "core/error.h"
#include "core/kernels.h"

namespace ringgrad {

// With the CUDA backend compiled in, core/cuda/device.cu defines these.
#ifndef RINGGRAD_WITH_CUDA
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
#endif

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

void select_local_device(int local_rank) {
#ifdef RINGGRAD_WITH_CUDA
  const int count = cuda_device_count();
  if (count > 0) cuda::set_home_device(local_rank % count);
#else
  (void)local_rank;
#endif
}

Device parse_device(const std::string& spec, int local_rank) {
  if (spec == "cpu") return Device::cpu();
  const int count = cuda_device_count();
  const std::string visible = cuda_compiled()
                                  ? str_cat(count, " CUDA device(s) are visible")
                                  : std::string("this build has no CUDA backend (configure with RINGGRAD_CUDA=ON)");
  int index = -1;
  if (spec == "cuda") {
    RG_CHECK(count > 0, "device", "'cuda' asked for, but ", visible);
    index = local_rank % count;
  } else if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5 &&
             spec.find_first_not_of("0123456789", 5) == std::string::npos) {
    index = std::stoi(spec.substr(5));
    RG_CHECK(index < count, "device", "'", spec, "' asked for, but ", visible);
  }
  if (index >= 0) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::set_home_device(index);  // threads and host-side driver calls (pinned memory) use this GPU
#endif
    return Device::cuda(index);
  }
  RG_FAIL("device", "unknown device '", spec, "' (expected cpu, cuda or cuda:N)");
}

}  // namespace ringgrad
