// Rung 3: buckets. The parameters, in the order backward finishes them, are cut into buckets of
// about kBucketBytes, and each bucket is copied into its own buffer and averaged by its own
// AllReduce -- still after backward, one after another. On its own this is no faster than rung 2
// (a few latencies instead of one): what buckets buy is that the first of them is complete long
// before backward ends, which rung 4 uses.
#include "learn/ladder/ladder.h"

namespace learn {

std::vector<std::vector<ringgrad::Tensor>> buckets_in_backward_order(ringgrad::nn::Module& model) {
  std::vector<ringgrad::Tensor> params = model.parameters();  // forward order
  std::vector<std::vector<ringgrad::Tensor>> buckets;
  int64_t bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {  // the last layer's first
    const auto size = static_cast<int64_t>(it->nbytes());
    if (buckets.empty() || (bytes + size > kBucketBytes && bytes > 0)) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(*it);
    bytes += size;
  }
  return buckets;
}

namespace {

class Buckets : public GradientSync {
 public:
  Buckets(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group)
      : buckets_(buckets_in_backward_order(model)), group_(group) {
    for (const auto& bucket : buckets_) {
      int64_t numel = 0;
      for (const ringgrad::Tensor& p : bucket) numel += p.numel();
      buffers_.push_back(ringgrad::zeros({numel}));
    }
  }
  std::string name() const override { return "buckets: one AllReduce per bucket, after backward"; }

  void backward(const ringgrad::Tensor& loss, bool synchronise) override {
    loss.backward();
    if (!synchronise) return;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      int64_t at = 0;
      for (ringgrad::Tensor& p : buckets_[b]) {
        buffers_[b].narrow(0, at, p.numel()).copy_(p.grad().reshape({-1}));
        at += p.numel();
      }
      group_.allreduce(buffers_[b], ringgrad::dist::ReduceOp::avg)->wait();
      at = 0;
      for (ringgrad::Tensor& p : buckets_[b]) {
        p.grad().copy_(buffers_[b].narrow(0, at, p.numel()).reshape(p.shape()));
        at += p.numel();
      }
    }
  }

 private:
  std::vector<std::vector<ringgrad::Tensor>> buckets_;
  std::vector<ringgrad::Tensor> buffers_;
  ringgrad::dist::ProcessGroup& group_;
};

}  // namespace

std::unique_ptr<GradientSync> make_buckets(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group) {
  return std::make_unique<Buckets>(model, group);
}

}  // namespace learn
