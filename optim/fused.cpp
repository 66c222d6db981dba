#include "optim/fused.h"

#include <initializer_list>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/native/backend.h"

namespace ringgrad::optim {

DType state_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
bool needs_master(DType t) { return t == DType::f16 || t == DType::bf16; }

namespace {

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

void* maybe(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                const SgdHyper& h) {
  check_dense("sgd", param, grad);
  check_state("sgd", param, {&master, &momentum});
  native::backend_sgd_update(param.device(), param.dtype(), param.raw_data(), grad.raw_data(), maybe(master),
                             maybe(momentum), param.numel(), h);
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamHyper& h) {
  check_dense("adam", param, grad);
  check_state("adam", param, {&master, &exp_avg, &exp_avg_sq});
  native::backend_adam_update(param.device(), param.dtype(), param.raw_data(), grad.raw_data(), maybe(master),
                              maybe(exp_avg), maybe(exp_avg_sq), param.numel(), h);
}

void FusedUpdates::sgd(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& momentum,
                       const SgdHyper& h) {
  if (!native::backend_batches_updates(param.device())) return sgd_update(param, grad, master, momentum, h);
  check_dense("sgd", param, grad);
  check_state("sgd", param, {&master, &momentum});
  queued_.push_back(Queued{param, grad, master, momentum, Tensor(), h, {}, false});
}

void FusedUpdates::adam(const Tensor& param, const Tensor& grad, const Tensor& master, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, const AdamHyper& h) {
  if (!native::backend_batches_updates(param.device())) return adam_update(param, grad, master, exp_avg, exp_avg_sq, h);
  check_dense("adam", param, grad);
  check_state("adam", param, {&master, &exp_avg, &exp_avg_sq});
  queued_.push_back(Queued{param, grad, master, exp_avg, exp_avg_sq, {}, h, true});
}

FusedUpdates::~FusedUpdates() {
  if (queued_.empty()) return;
  try {
    run();
  } catch (...) {}
}

void FusedUpdates::run() {
  // One launch group per (repeat, device, dtype, optimizer), in one pass. `repeat` counts earlier
  // entries of the same parameter, so a parameter listed twice lands in a group that launches after
  // its first (the map iterates repeat 0 before repeat 1) instead of racing with it in one kernel.
  // Taken out first: if a launch throws, the destructor must not launch the rest a second time.
  const std::vector<Queued> queued = std::move(queued_);
  queued_.clear();
  using Key = std::tuple<int, int, int, int, bool>;  // repeat, device type, device index, dtype, is_adam
  std::map<Key, std::vector<const Queued*>> groups;
  std::unordered_map<const void*, int> seen;
  for (const Queued& q : queued) {
    const Device d = q.param.device();
    groups[{seen[q.param.raw_data()]++, static_cast<int>(d.type), d.index, static_cast<int>(q.param.dtype()),
            q.is_adam}]
        .push_back(&q);
  }
  for (const auto& [key, members] : groups) {
    const auto& [repeat, type, index, dtype, is_adam] = key;
    const Device device{static_cast<DeviceType>(type), index};
    if (is_adam) {
      std::vector<AdamArgs> args;
      for (const Queued* q : members)
        args.push_back({q->param.raw_data(), q->grad.raw_data(), maybe(q->master), maybe(q->state1), maybe(q->state2),
                        q->param.numel(), q->adam});
      native::backend_adam_update_many(device, static_cast<DType>(dtype), args.data(), args.size());
    } else {
      std::vector<SgdArgs> args;
      for (const Queued* q : members)
        args.push_back(
            {q->param.raw_data(), q->grad.raw_data(), maybe(q->master), maybe(q->state1), q->param.numel(), q->sgd});
      native::backend_sgd_update_many(device, static_cast<DType>(dtype), args.data(), args.size());
    }
  }
}

}  // namespace ringgrad::optim
