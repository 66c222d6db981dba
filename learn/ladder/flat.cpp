// Rung 2: one flat buffer. After backward every gradient is copied into one contiguous buffer, the
// buffer is averaged by one AllReduce, and the results are copied back. One latency instead of one
// per parameter, for two copies of the gradients -- but still nothing overlaps: the link waits for
// the whole backward, and backward's cores wait for the link.
#include "learn/ladder/ladder.h"

namespace learn {
namespace {

class Flat : public GradientSync {
 public:
  Flat(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group) : params_(model.parameters()), group_(group) {
    int64_t numel = 0;
    for (const ringgrad::Tensor& p : params_) numel += p.numel();
    buffer_ = ringgrad::zeros({numel});  // (Ψ) f32: every gradient, end to end
  }
  std::string name() const override { return "flat: one buffer, one AllReduce"; }

  void backward(const ringgrad::Tensor& loss, bool synchronise) override {
    loss.backward();
    if (!synchronise) return;
    int64_t at = 0;
    for (ringgrad::Tensor& p : params_) {  // copy in
      buffer_.narrow(0, at, p.numel()).copy_(p.grad().reshape({-1}));
      at += p.numel();
    }
    group_.allreduce(buffer_, ringgrad::dist::ReduceOp::avg)->wait();
    at = 0;
    for (ringgrad::Tensor& p : params_) {  // copy out
      p.grad().copy_(buffer_.narrow(0, at, p.numel()).reshape(p.shape()));
      at += p.numel();
    }
  }

 private:
  std::vector<ringgrad::Tensor> params_;
  ringgrad::dist::ProcessGroup& group_;
  ringgrad::Tensor buffer_;
};

}  // namespace

std::unique_ptr<GradientSync> make_flat(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group) {
  return std::make_unique<Flat>(model, group);
}

}  // namespace learn
