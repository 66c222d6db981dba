#include "dist/staging.h"

#include <utility>
#include <vector>

#include "core/error.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad::dist::detail {

namespace {

// An op on staged tensors: when it finishes, copies each staged result back to the caller's tensor.
class StagedOp : public PendingOp {
 public:
  StagedOp(std::unique_ptr<PendingOp> inner, std::vector<std::pair<Tensor, Tensor>> copy_back)
      : inner_(std::move(inner)), copy_back_(std::move(copy_back)) {}
  bool poll() override {
    if (!inner_->poll()) return false;
    // native::copy_, not Tensor::copy_: see Staging::staged.
    for (auto& [destination, result] : copy_back_) native::copy_(destination, result);
    return true;
  }
  void abandon() override { inner_->abandon(); }

 private:
  std::unique_ptr<PendingOp> inner_;
  std::vector<std::pair<Tensor, Tensor>> copy_back_;  // (the caller's tensor, the staged result)
};

}  // namespace

// `inner` itself when nothing was staged.
std::unique_ptr<PendingOp> Staging::staged(std::unique_ptr<PendingOp> inner, const Tensor& out,
                                           const Tensor& staged_out) {
  if (out.is_same(staged_out)) return inner;
  return std::make_unique<StagedOp>(std::move(inner), std::vector<std::pair<Tensor, Tensor>>{{out, staged_out}});
}

// The device the backend's start_* works on: the host, or the group's GPU (nccl). Tensors elsewhere
// are staged there and back -- for nccl that is the reverse trip: small CPU tensors (DDP's parameter
// check, bucket order and found-inf flag) go to the GPU and back.
Device Staging::work_device() const { return native_device_ ? *native_device_ : Device::cpu(); }

bool Staging::stages(Device device) const {
  return device != work_device() || (stage_host_tensors_ && device.is_cpu());
}

InPlaceBuffer* Staging::in_place_buffer(const Tensor& t) const {
  if (t.numel() == 0 || stages(t.device())) return nullptr;
  auto* buffer = dynamic_cast<InPlaceBuffer*>(t.storage()->owner());
  return buffer != nullptr && buffer->group() == group_ ? buffer : nullptr;
}

// Staging crosses between the host and one GPU, never between two GPUs.
void Staging::check_stageable(const char* op, const Tensor& t) const {
  const Device target = work_device();
  RG_CHECK(t.device().is_cpu() || target.is_cpu(), op, "tensor ", t.desc(), " is on another GPU than this group's ",
           target.str(), " (backend '", backend_, "', rank ", rank_, "/", size_, ")");
}

// A GPU tensor's host side lives in pinned memory: both copies are then DMA transfers, without the
// driver's bounce buffer. A host tensor staged for tests (Note [Host staging without a GPU]) needs
// none, and a build without CUDA has none to give.
Tensor Staging::host_buffer_for(const Tensor& t) {
  if (t.device().is_cpu()) return empty(t.shape(), {.dtype = t.dtype()});
  return native::empty_pinned(t.shape(), t.dtype());
}

Tensor Staging::in(const char* op, const Tensor& t) const {
  if (!stages(t.device())) return t;
  check_stageable(op, t);
  if (!work_device().is_cpu()) return t.to(work_device());
  Tensor host = host_buffer_for(t);
  native::copy_(host, t);
  return host;
}

Tensor Staging::out(const char* op, const Tensor& t) const {
  if (!stages(t.device())) return t;
  check_stageable(op, t);
  if (!work_device().is_cpu()) return empty(t.shape(), {.dtype = t.dtype(), .device = work_device()});
  return host_buffer_for(t);
}

// A send copies a GPU tensor in when submitted, a receive copies the message back before its Work
// completes (Note [CUDA tensors through host staging]).
Tensor Staging::host_side(const Tensor& t, bool copy_in) const {
  if (t.device().is_cpu() && !stage_host_tensors_) return t;
  Tensor host = host_buffer_for(t);
  if (copy_in) native::copy_(host, t);
  return host;
}

}  // namespace ringgrad::dist::detail
