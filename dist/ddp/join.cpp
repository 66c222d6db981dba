#include "dist/ddp/join.h"

#include "autograd/engine.h"
#include "core/error.h"
#include "core/ops.h"
#include "dist/ddp/reducer.h"
#include "optim/grad_scaler.h"

namespace ringgrad::dist {

Join::Join(DistributedDataParallel& ddp, JoinOptions options)
    : ddp_(ddp), options_(std::move(options)), uncaught_at_entry_(std::uncaught_exceptions()) {
  RG_CHECK(ddp_.join_ == nullptr, "dist.Join", "rank ", ddp_.group().rank(), "/", ddp_.group().size(),
           ": this DistributedDataParallel is already in a Join");
  // A rank out of data would not take the sharded optimizer's step, whose allgather every rank needs.
  RG_CHECK(!ddp_.buckets_sharded(), "dist.Join", "rank ", ddp_.group().rank(), "/", ddp_.group().size(),
           ": Join does not support a model whose optimizer shards its buckets (dist::ZeroOptimizer): a rank out "
           "of data takes no optimizer step, and the step's parameter allgather needs every rank. Keep the batch "
           "counts even (DistributedSampler's padding) instead");
  for (const optim::GradScaler* s : options_.scalers) RG_CHECK(s != nullptr, "dist.Join", "a scaler is null");
  ddp_.join_ = this;
  ddp_.reducer_->enter_join(options_.divide_by_initial_world_size);
}

Join::~Join() noexcept(false) {
  if (finished_) return;
  if (std::uncaught_exceptions() > uncaught_at_entry_) {
    leave();
    return;
  }
  finish();
}

void Join::leave() {
  ddp_.reducer_->leave_join();
  ddp_.join_ = nullptr;
  finished_ = true;
}

JoinReport Join::finish() {
  RG_CHECK(!finished_, "dist.Join", "rank ", ddp_.group().rank(), "/", ddp_.group().size(),
           ": finish() was already called");
  JoinReport report;
  bool ran_out_last = false;
  try {
    // Note [Join's agreement]: answer the others' forwards until none is left.
    for (bool first = true;; first = false) {
      const auto agreed = ddp_.agree_on_step(/*active=*/false, /*sync=*/false);
      if (first) ran_out_last = agreed.active == 0;
      if (agreed.active == 0) break;
      ++report.shadowed_forwards;
      ddp_.sync_buffers(agreed.root);
      if (!agreed.sync) continue;
      ++report.shadowed_steps;
      ddp_.reducer_->shadow_backward();
      for (optim::GradScaler* s : options_.scalers) s->shadow_found_inf();
    }
    // The replicas that took every step hold the current model: the highest-numbered one is the source.
    ProcessGroup& group = ddp_.group();
    Tensor mine = full({1}, ran_out_last ? group.rank() : -1, {.dtype = DType::i32});
    group.allreduce(mine, ReduceOp::max)->wait();
    report.authority = static_cast<int>(mine.item());
    autograd::NoGradGuard no_grad;
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& [name, t] : ddp_.module().named_parameters())
      works.push_back(group.broadcast(t, report.authority));
    for (const auto& [name, t] : ddp_.module().named_buffers()) works.push_back(group.broadcast(t, report.authority));
    for (auto& w : works) w->wait();
  } catch (...) {
    leave();
    throw;
  }
  leave();
  return report;
}

}  // namespace ringgrad::dist
