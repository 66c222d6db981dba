// Exercise: ZeRO stage 1 from two collectives, reduce_scatter and allgather (docs/learn/12-zero.md).
#pragma once

#include <vector>

#include "dist/process_group.h"

namespace learn {

// Adam whose state is sharded across the ranks of `group`. The parameters are seen as one flat
// vector of Ψ elements, padded to N m; rank r owns elements [r m, (r + 1) m) and keeps Adam's two
// moments for them alone. step() takes every rank's *local* gradients (no DDP in front of it):
//   1. reduce_scatter (avg) the flat gradient: rank r receives the average of its m elements;
//   2. Adam-update its m elements of the flat parameters;
//   3. allgather the N updated slices, so every rank holds every parameter again.
class Zero1Adam {
 public:
  Zero1Adam(std::vector<ringgrad::Tensor> params, ringgrad::dist::ProcessGroup& group, double lr);
  void step();
  size_t state_bytes() const;  // this rank's moments

 private:
  std::vector<ringgrad::Tensor> params_;
  ringgrad::dist::ProcessGroup& group_;
  double lr_;
  int64_t numel_ = 0, m_ = 0;              // Ψ, and the elements each rank owns
  ringgrad::Tensor exp_avg_, exp_avg_sq_;  // (m): this rank's moments
  int64_t t_ = 0;
};

}  // namespace learn
