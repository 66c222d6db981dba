// The window of max pooling, written once for both backends (../shared/STYLE.md, "One kernel body,
// two launchers"): core/cpu/conv.cpp calls it per output on the CPU, core/cuda/conv.cu per CUDA
// thread, so the CPU tests cover the rule the GPU follows.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace ringgrad {

// Output (i, j) of a k x k window with stride s and padding p over one (h, w) plane: its value and
// the flat position (row * w + col) it came from. The first maximum in window order wins, and a NaN
// wins (the last one seen), so NaNs propagate as in PyTorch. Padding is never the maximum.
template <class T>
RG_HOST_DEVICE RG_INLINE void max_pool_window(const T* plane, int64_t h, int64_t w, int64_t i, int64_t j, int64_t k,
                                              int64_t s, int64_t p, T* value, int64_t* index) {
  int64_t best = -1;
  T best_value = T(0);
  for (int64_t a = 0; a < k; ++a) {
    const int64_t yy = i * s - p + a;
    if (yy < 0 || yy >= h) continue;
    for (int64_t b = 0; b < k; ++b) {
      const int64_t xx = j * s - p + b;
      if (xx < 0 || xx >= w) continue;
      const T v = plane[yy * w + xx];
      if (best < 0 || v > best_value || v != v) best = yy * w + xx, best_value = v;
    }
  }
  *value = best_value;
  *index = best;
}

}  // namespace ringgrad
