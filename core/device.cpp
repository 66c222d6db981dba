#include "core/device.h"

namespace ringgrad {

// With the CUDA backend compiled in, core/cuda/device.cu defines these.
#ifndef RINGGRAD_WITH_CUDA
bool cuda_compiled() { return false; }
int cuda_device_count() { return 0; }
#endif

}  // namespace ringgrad
