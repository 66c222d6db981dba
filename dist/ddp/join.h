// Join: training over uneven inputs. A rank whose data ran out keeps answering the other ranks'
// collectives until every rank has run out, so an epoch in which the ranks hold different numbers of
// batches ends cleanly instead of hanging in the next AllReduce (PyTorch's torch.distributed.Join).
//
//   {
//     dist::Join join(ddp, {.scalers = {&scaler}});   // every rank, before its loop
//     for (auto& [x, y] : loader) { ...forward, backward, step... }
//     join.finish();                                 // out of data: shadow the others until all are
//   }                                                // (the destructor finishes too)
//
// Note [Join's agreement]: under a Join, every forward of the DDP model begins with one small
// allgather in which each rank says whether it still has data and whether this forward's backward
// will reduce gradients (no_sync() not in force). A rank inside finish() answers every such
// allgather with "no data"; when some rank is still active, it shadows what that forward is followed
// by -- the buffers' broadcast (from the lowest active rank, whose buffers are current) and, for a
// synchronising step, every bucket's reduction with zero gradients, then each scaler's found-inf
// agreement -- and waits for the next one. When an allgather finds no rank active, every rank is in
// finish(), and the loop ends on all of them at once. The cost while every rank has data: one
// allgather of two integers per forward.
//
// Note [Join's divisor]: a step to which k < N ranks contributed is averaged over those k (the
// others sent zeros): the result is the gradient of the mean loss over the examples that were really
// there, as one process would compute it over those ranks' batches. JoinOptions::
// divide_by_initial_world_size divides by N instead (PyTorch's default), which weights each example
// as in the full steps but shrinks the late steps' gradients.
//
// When every rank has finished, the replicas are made equal: the parameters and buffers of a rank
// that took every step (the highest-numbered of those that ran out last) are broadcast to all.
// Optimizer states are not: a rank that joined early did not step, so its Adam moments (and its
// scheduler) lag those of the ranks that kept training. Save checkpoints from a rank that finished
// last (JoinReport::authority), or keep the batch counts even (DistributedSampler's pad) where the
// optimizer state must match on every rank.
//
// Only DDP's own collectives (and the scalers' found-inf agreement) are shadowed: any other
// collective in the loop -- an AllReduce of the loss for logging, a checkpoint's agreement -- has no
// partner on a joined rank, and times out with the group's diagnosis.
#pragma once

#include <exception>
#include <vector>

#include "dist/ddp/ddp.h"

namespace ringgrad::optim {
class GradScaler;
}

namespace ringgrad::dist {

struct JoinOptions {
  // GradScalers made collective with sync_found_inf: a joined rank answers their agreement.
  std::vector<optim::GradScaler*> scalers;
  // Note [Join's divisor]: false averages a step over the ranks that contributed to it.
  bool divide_by_initial_world_size = false;
};

// What finish() saw on this rank.
struct JoinReport {
  int shadowed_forwards = 0;  // the others' forwards answered after this rank ran out
  int shadowed_steps = 0;     // of which synchronising (gradient reductions shadowed)
  int authority = 0;          // the rank whose parameters and buffers every rank now holds
};

class Join {
 public:
  Join(DistributedDataParallel& ddp, JoinOptions options = {});
  // Finishes unless an exception is unwinding through it (then it only leaves the Join: the other
  // ranks see this rank's collectives stop and time out with a diagnosis).
  ~Join() noexcept(false);
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Collective: this rank is out of data. Returns when every rank has called it, with the replicas
  // equal again. Call it once.
  JoinReport finish();

 private:
  void leave();
  DistributedDataParallel& ddp_;
  JoinOptions options_;
  bool finished_ = false;
  int uncaught_at_entry_;
};

}  // namespace ringgrad::dist
