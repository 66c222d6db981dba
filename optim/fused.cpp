#include "optim/fused.h"

#include <cmath>
#include <initializer_list>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/parallel.h"

namespace ringgrad::optim {

DType state_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
bool needs_master(DType t) { return t == DType::f16 || t == DType::bf16; }

namespace {

constexpr int64_t kGrain = 16384;

void check_dense(const char* op, const Tensor& param, const Tensor& grad) {
  RG_CHECK(grad.device() == param.device(), op, "param ", param.desc(), " and grad ", grad.desc(),
           " are on different devices");
  RG_CHECK(param.is_contiguous() && grad.is_contiguous() && grad.shape() == param.shape() &&
               grad.dtype() == param.dtype(),
           op, "param ", param.desc(), " and grad ", grad.desc(), " must be dense with one shape and dtype");
}

// Optimizer state must sit beside its parameter: a kernel cannot read the other device's memory.
void check_state(const char* op, const Tensor& param, std::initializer_list<const Tensor*> states) {
  for (const Tensor* s : states)
    RG_CHECK(!s->defined() || (s->device() == param.device() && s->numel() == param.numel() && s->is_contiguous()), op,
             "state ", s->desc(), " must be dense with param ", param.desc(), "'s size, on its device");
}

template <class S>
S* maybe(const Tensor& t) {
  return t.defined() ? static_cast<S*>(t.raw_data()) : nullptr;
}

// Runs step(i) for every i < n on the CPU's threads.
//
// Each chunk runs a local copy of the functor. Through a reference, its fields (lr, the state
// pointers, the flags) live in memory that a store to param[i] -- a float, like lr -- might alias, so
// GCC reloads them every element and neither vectorises the loop nor moves the per-element
// branches out of it; a copy whose address never escapes cannot be aliased. W1's momentum SGD went
// from 9.9% of a step to 4.2% (docs/performance.md, change 9). For f16 parameters the loop body is
// longer (conversions) than GCC's default limit for moving branches out of loops, so this
// file is compiled with a higher one (optim/CMakeLists.txt): 7.6 -> 1.0 ms for 670k f16 parameters.
template <class Step>
void run_on_cpu(const Step& step, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    const Step local = step;
    for (int64_t i = b; i < e; ++i) local(i);
  });
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                const SgdHyper& h) {
  check_dense("sgd", param, grad);
  check_state("sgd", param, {&master, &momentum});
#ifdef RINGGRAD_WITH_CUDA
  if (param.device().is_cuda())
    return cuda::sgd_update(param.dtype(), param.raw_data(), grad.raw_data(), maybe<void>(master),
                            maybe<void>(momentum), param.numel(), h);
#endif
  dispatch_param(param.dtype(), [&](auto p, auto s) {
    using P = decltype(p);
    using S = decltype(s);
    run_on_cpu(SgdStep<P, S>(static_cast<P*>(param.raw_data()), static_cast<const P*>(grad.raw_data()),
                             maybe<S>(master), maybe<S>(momentum), h),
               param.numel());
  });
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamHyper& h) {
  check_dense("adam", param, grad);
  check_state("adam", param, {&master, &exp_avg, &exp_avg_sq});
#ifdef RINGGRAD_WITH_CUDA
  if (param.device().is_cuda())
    return cuda::adam_update(param.dtype(), param.raw_data(), grad.raw_data(), maybe<void>(master),
                             maybe<void>(exp_avg), maybe<void>(exp_avg_sq), param.numel(), h);
#endif
  dispatch_param(param.dtype(), [&](auto p, auto s) {
    using P = decltype(p);
    using S = decltype(s);
    run_on_cpu(AdamStep<P, S>(static_cast<P*>(param.raw_data()), static_cast<const P*>(grad.raw_data()),
                              maybe<S>(master), maybe<S>(exp_avg), maybe<S>(exp_avg_sq), h),
               param.numel());
  });
}

void FusedUpdates::sgd(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                       const SgdHyper& h) {
  if (!param.device().is_cuda()) return sgd_update(param, grad, master, momentum, h);
  check_dense("sgd", param, grad);
  check_state("sgd", param, {&master, &momentum});
  queued_.push_back(Queued{param, grad, master, momentum, Tensor(), h, {}, false});
}

void FusedUpdates::adam(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, const AdamHyper& h) {
  if (!param.device().is_cuda()) return adam_update(param, grad, master, exp_avg, exp_avg_sq, h);
  check_dense("adam", param, grad);
  check_state("adam", param, {&master, &exp_avg, &exp_avg_sq});
  queued_.push_back(Queued{param, grad, master, exp_avg, exp_avg_sq, {}, h, true});
}

FusedUpdates::~FusedUpdates() {
  if (queued_.empty()) return;
  try {
    run();
  } catch (...) {
  }
}

void FusedUpdates::run() {
#ifdef RINGGRAD_WITH_CUDA
  // One launch group per (repeat, device, dtype, optimizer), in one pass. `repeat` counts earlier
  // entries of the same parameter, so a parameter listed twice lands in a group that launches after
  // its first (the map iterates repeat 0 before repeat 1) instead of racing with it in one kernel.
  // Taken out first: if a launch throws, the destructor must not launch the rest a second time.
  const std::vector<Queued> queued = std::move(queued_);
  queued_.clear();
  using Key = std::tuple<int, int, int, bool>;
  std::map<Key, std::vector<const Queued*>> groups;
  std::unordered_map<const void*, int> seen;
  for (const Queued& q : queued)
    groups[{seen[q.param.raw_data()]++, q.param.device().index, static_cast<int>(q.param.dtype()), q.is_adam}]
        .push_back(&q);
  for (const auto& [key, members] : groups) {
    const auto& [repeat, device, dtype, is_adam] = key;
    if (is_adam) {
      std::vector<cuda::AdamArgs> args;
      for (const Queued* q : members)
        args.push_back({q->param.raw_data(), q->grad.raw_data(), maybe<void>(q->master), maybe<void>(q->state1),
                        maybe<void>(q->state2), q->param.numel(), q->adam});
      cuda::adam_update_many(device, static_cast<DType>(dtype), args.data(), args.size());
    } else {
      std::vector<cuda::SgdArgs> args;
      for (const Queued* q : members)
        args.push_back({q->param.raw_data(), q->grad.raw_data(), maybe<void>(q->master), maybe<void>(q->state1),
                        q->param.numel(), q->sgd});
      cuda::sgd_update_many(device, static_cast<DType>(dtype), args.data(), args.size());
    }
  }
#else
  const bool empty = queued_.empty();
  queued_.clear();
  RG_CHECK(empty, "optimizer", "CUDA parameters in a build without CUDA");
#endif
}

}  // namespace ringgrad::optim
