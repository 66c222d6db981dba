// The CUDA launcher for the fused optimizer updates: a grid-stride kernel over the functors of
// optim/fused_math.h, the same ones the CPU loop runs (optim/fused.cpp).
#include "core/cuda/device.h"
#include "core/cuda/launch.h"
#include "optim/fused_math.h"

namespace ringgrad::optim::cuda {
namespace {

using namespace ringgrad::cuda::detail;

template <class Step>
__global__ void step_kernel(Step step, int64_t n) {
  for (int64_t i = first_thread(); i < n; i += thread_stride()) step(i);
}

template <class Step>
void launch(const Step& step, int64_t n, const void* param) {
  if (n == 0) return;
  ringgrad::cuda::DeviceGuard guard(ringgrad::cuda::device_of(param));
  step_kernel<<<blocks_for(n), kThreads>>>(step, n);
  RG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sgd_update(DType param_dtype, void* param, const void* grad, void* master, void* momentum, int64_t n,
                const SgdHyper& h) {
  dispatch_param(param_dtype, [&](auto p, auto s) {
    using P = decltype(p);
    using S = decltype(s);
    launch(SgdStep<P, S>(static_cast<P*>(param), static_cast<const P*>(grad), static_cast<S*>(master),
                         static_cast<S*>(momentum), h),
           n, param);
  });
}

void adam_update(DType param_dtype, void* param, const void* grad, void* master, void* exp_avg, void* exp_avg_sq,
                 int64_t n, const AdamHyper& h) {
  dispatch_param(param_dtype, [&](auto p, auto s) {
    using P = decltype(p);
    using S = decltype(s);
    launch(AdamStep<P, S>(static_cast<P*>(param), static_cast<const P*>(grad), static_cast<S*>(master),
                          static_cast<S*>(exp_avg), static_cast<S*>(exp_avg_sq), h),
           n, param);
  });
}

}  // namespace ringgrad::optim::cuda
