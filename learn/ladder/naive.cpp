// Rung 1: the most naive data parallelism. Backward runs to the end; then every parameter's
// gradient is averaged on its own, one blocking AllReduce after another. Correct -- and every
// parameter pays the link's latency once, with nothing else to do meanwhile.
#include "learn/ladder/ladder.h"

namespace learn {
namespace {

class Naive : public GradientSync {
 public:
  Naive(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group)
      : params_(model.parameters()), group_(group) {}
  std::string name() const override { return "naive: one AllReduce per parameter"; }

  void backward(const ringgrad::Tensor& loss, bool synchronise) override {
    loss.backward();
    if (!synchronise) return;
    for (ringgrad::Tensor& p : params_) group_.allreduce(p.grad(), ringgrad::dist::ReduceOp::avg)->wait();
  }

 private:
  std::vector<ringgrad::Tensor> params_;
  ringgrad::dist::ProcessGroup& group_;
};

}  // namespace

std::unique_ptr<GradientSync> make_naive(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group) {
  return std::make_unique<Naive>(model, group);
}

}  // namespace learn
