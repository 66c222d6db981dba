// The dtype dispatch of the CPU kernels that compute in the front ends' compute dtype (internal to
// core/cpu/): the row, attention, convolution and pooling kernels see f32 (f16 / bf16 tensors are
// converted by the front end) or f64, as their CUDA twins do (detail::dispatch_compute in
// core/cuda/launch.h).
#pragma once

#include "core/dtype.h"
#include "core/error.h"

namespace ringgrad::cpu {

// Calls fn(float{}) or fn(double{}).
template <class Fn>
void dispatch_compute(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    default: RG_FAIL(op, "the CPU kernel computes in f32 or f64, got ", dtype_name(dtype));
  }
}

}  // namespace ringgrad::cpu
