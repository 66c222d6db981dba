// Rung 4: overlap. A hook on every parameter (register_post_accumulate_grad_hook) fires the moment
// its gradient is final in this backward. When the last gradient of a bucket has arrived, the
// bucket is copied into its buffer and its AllReduce *started* -- not waited for: the
// communication thread sends it while backward computes the layers below. After backward, only
// what is still in flight is waited for, and the averages are copied back. This is DDP's design
// (dist/ddp/reducer.cpp), less what DDP adds: gradients that live in the buckets (no copies),
// buckets rebuilt in the order gradients really arrive, unused parameters, hooks that compress.
//
// Rung 5 is this class with synchronise = false on every micro-batch but the last: the hooks then
// launch nothing and gradients accumulate in .grad, so K micro-batches cost one set of AllReduces.
#include <map>

#include "core/error.h"
#include "learn/ladder/ladder.h"

namespace learn {
namespace {

class Overlap : public GradientSync {
 public:
  Overlap(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group)
      : buckets_(buckets_in_backward_order(model)), group_(group), pending_(buckets_.size()) {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      int64_t numel = 0;
      for (ringgrad::Tensor& p : buckets_[b]) {
        numel += p.numel();
        // The hook holds the bucket's index; `this` outlives the parameters' hooks (removed below).
        hooks_.emplace_back(p, p.register_post_accumulate_grad_hook([this, b](ringgrad::Tensor&) { ready(b); }));
      }
      buffers_.push_back(ringgrad::zeros({numel}));
    }
  }
  ~Overlap() override {
    for (auto& [param, handle] : hooks_) param.remove_post_accumulate_grad_hook(handle);
  }
  std::string name() const override { return "overlap: a bucket's AllReduce starts as its last gradient arrives"; }

  void backward(const ringgrad::Tensor& loss, bool synchronise) override {
    synchronise_ = synchronise;
    next_ = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].size());
    loss.backward();  // the hooks start the buckets' AllReduces as backward goes
    if (!synchronise) return;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // Every parameter gets a gradient in this model; a bucket left unlaunched would be a bug here.
      RG_CHECK(works_.count(b) == 1, "learn.Overlap", "bucket ", b, " was never launched: a parameter got no gradient");
      works_.at(b)->wait();
      int64_t at = 0;
      for (ringgrad::Tensor& p : buckets_[b]) {
        p.grad().copy_(buffers_[b].narrow(0, at, p.numel()).reshape(p.shape()));
        at += p.numel();
      }
    }
    works_.clear();
  }

 private:
  // One more gradient of bucket b is final. Complete buckets launch in index order, never out of
  // it: collectives match by order across ranks, and the order gradients become ready in need not
  // be the same on every rank (Note [Buckets launch in index order] in dist/ddp/reducer.h).
  void ready(size_t b) {
    if (!synchronise_ || --pending_[b] > 0) return;
    while (next_ < buckets_.size() && pending_[next_] == 0) launch(next_++);
  }

  void launch(size_t b) {
    int64_t at = 0;
    for (ringgrad::Tensor& p : buckets_[b]) {
      buffers_[b].narrow(0, at, p.numel()).copy_(p.grad().reshape({-1}));
      at += p.numel();
    }
    works_[b] = group_.allreduce(buffers_[b], ringgrad::dist::ReduceOp::avg);  // started, not waited for
  }

  std::vector<std::vector<ringgrad::Tensor>> buckets_;
  std::vector<ringgrad::Tensor> buffers_;
  ringgrad::dist::ProcessGroup& group_;
  std::vector<int> pending_;  // gradients bucket b still waits for in this backward
  std::map<size_t, std::shared_ptr<ringgrad::dist::Work>> works_;
  std::vector<std::pair<ringgrad::Tensor, int>> hooks_;
  bool synchronise_ = true;
  size_t next_ = 0;  // the next bucket to launch, in index order
};

}  // namespace

std::unique_ptr<GradientSync> make_overlap(ringgrad::nn::Module& model, ringgrad::dist::ProcessGroup& group) {
  return std::make_unique<Overlap>(model, group);
}

}  // namespace learn
