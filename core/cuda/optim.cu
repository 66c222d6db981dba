// The CUDA launcher for the fused optimizer updates: a grid-stride kernel over the functors of
// core/optim_math.h, the same ones the CPU loop runs (core/cpu/optim.cpp).
#include <vector>

#include "core/cuda/device.h"
#include "core/cuda/launch.h"
#include "core/kernels.h"
#include "core/optim_math.h"

namespace ringgrad::cuda {
namespace {

using namespace detail;

template <class Step>
__global__ void step_kernel(Step step, int64_t n) {
  for (int64_t i = first_thread(); i < n; i += thread_stride()) step(i);
}

template <class Step>
void launch(const Step& step, int64_t n, const void* param) {
  if (n == 0) return;
  DeviceGuard guard(device_of(param));
  step_kernel<<<blocks_for(n), kThreads>>>(step, n);
  RG_CUDA_CHECK_LAUNCH();
}

// Note [Multi-tensor updates]: an optimizer step updates every parameter, and a model has dozens
// of them (GPT-mini: ~50), most small -- a bias, a layer_norm weight. One launch per parameter
// costs a few microseconds of launch latency each, more than the update of a small tensor itself.
// So the optimizers queue their CUDA updates (optim::FusedUpdates) and launch one kernel for up to
// kListBytes worth of parameters: the kernel's argument is the list itself -- one functor per
// parameter (its pointers and hyperparameters) and the first block of each -- so nothing is copied
// to the device first. Block b finds its parameter t by the block ranges and updates elements
// [(b - first_block[t]) * kChunk, ...) of it. The list is passed as a __grid_constant__ parameter
// so that indexing it with t reads the parameter space instead of copying the list per thread.
inline constexpr int64_t kChunk = int64_t{kThreads} * 4;  // elements per block
inline constexpr size_t kListBytes = 4000;                // kernel parameters must stay below 4 KiB

template <class Step>
struct StepList {
  // As many parameters as fit kListBytes with their sizes and block ranges.
  static constexpr int kMax = static_cast<int>((kListBytes - 16) / (sizeof(Step) + 2 * sizeof(int64_t)));
  Step steps[kMax];
  int64_t n[kMax];
  int64_t first_block[kMax + 1];  // blocks [first_block[t], first_block[t + 1]) update parameter t
  int count;
};

template <class Step>
__global__ void multi_step_kernel(const __grid_constant__ StepList<Step> list) {
  int t = 0;
  while (t + 1 < list.count && blockIdx.x >= list.first_block[t + 1]) ++t;
  const int64_t begin = (static_cast<int64_t>(blockIdx.x) - list.first_block[t]) * kChunk;
  const int64_t end = begin + kChunk < list.n[t] ? begin + kChunk : list.n[t];
  const Step& step = list.steps[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) step(i);
}

// steps[i] updates n[i] elements; all on the current device.
template <class Step>
void launch_many(const std::vector<Step>& steps, const std::vector<int64_t>& n) {
  using List = StepList<Step>;
  static_assert(sizeof(List) <= 4096, "kernel parameters are limited to 4 KiB");
  static_assert(List::kMax >= 8, "too few parameters per launch to be worth it");
  for (size_t at = 0; at < steps.size();) {
    List list{};
    int64_t blocks = 0;
    int count = 0;
    for (; at < steps.size() && count < List::kMax; ++at) {
      if (n[at] == 0) continue;
      list.steps[count] = steps[at];
      list.n[count] = n[at];
      list.first_block[count] = blocks;
      blocks += (n[at] + kChunk - 1) / kChunk;
      ++count;
    }
    if (count == 0) continue;
    list.first_block[count] = blocks;
    list.count = count;
    RG_CHECK(blocks <= int64_t{0x7fffffff}, "optimizer", "multi-tensor update of ", blocks,
             " blocks exceeds CUDA's grid limit");
    multi_step_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(list);
    RG_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

// One functor per parameter, make(P{}, S{}, args[i]), all launched together.
template <class Args, class Make>
void update_many(int device, DType param_dtype, const Args* args, size_t count, Make make) {
  if (count == 0) return;
  DeviceGuard guard(device);
  dispatch_param(param_dtype, [&](auto p, auto s) {
    std::vector<decltype(make(p, s, args[0]))> steps;
    std::vector<int64_t> n;
    for (size_t i = 0; i < count; ++i) {
      steps.push_back(make(p, s, args[i]));
      n.push_back(args[i].n);
    }
    launch_many(steps, n);
  });
}

void sgd_update_many(int device, DType param_dtype, const SgdArgs* args, size_t count) {
  update_many(device, param_dtype, args, count, [](auto p, auto s, const SgdArgs& a) {
    using P = decltype(p);
    using S = decltype(s);
    return SgdStep<P, S>(static_cast<P*>(a.param), static_cast<const P*>(a.grad), static_cast<S*>(a.master),
                         static_cast<S*>(a.momentum), a.h);
  });
}

void adam_update_many(int device, DType param_dtype, const AdamArgs* args, size_t count) {
  update_many(device, param_dtype, args, count, [](auto p, auto s, const AdamArgs& a) {
    using P = decltype(p);
    using S = decltype(s);
    return AdamStep<P, S>(static_cast<P*>(a.param), static_cast<const P*>(a.grad), static_cast<S*>(a.master),
                          static_cast<S*>(a.exp_avg), static_cast<S*>(a.exp_avg_sq), a.h);
  });
}

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

}  // namespace ringgrad::cuda
