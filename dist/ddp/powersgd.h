// PowerSGD (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
// Distributed Optimization", NeurIPS 2019) as a DDP communication hook, behaving as PyTorch's
// powerSGD_hook does (public; dist/ddp/ddp.h users include it for the state).
//
// Note [PowerSGD]: a gradient matrix M (n, m) -- a parameter's gradient viewed as (shape[0], rest)
// -- is sent as two thin matrices P (n, r) and Q (m, r) instead, (n + m) r numbers for n m:
//
//   M += e                        error feedback: what compression lost last time (Note [Residuals by parameter])
//   orthogonalize Q               Q: last step's (warm start), or N(0, 1) the first time, the same on every rank
//   P = M Q; AllReduce-sum P       one power-iteration step: P spans M's leading columns
//   orthogonalize P               (Gram-Schmidt, column by column)
//   Q = Mᵀ P; AllReduce-average Q
//   M̂ = P Qᵀ                      the average over ranks of M's projection on span(P), on every rank
//   e = M - M̂                     kept for the next step
//
// Tensors not worth it -- vectors (biases, norms) and matrices where (n + m) r * min_compression_rate
// >= n m -- travel uncompressed, batched with the Ps into one AllReduce. For the first
// start_iteration steps the whole bucket is AllReduce-averaged instead (early training is
// sensitive to gradient error). With error feedback, e is kept for the uncompressed tensors too (as
// PyTorch does): there it is this rank's gradient minus the average, which averages to zero over
// ranks. Over k steps the sum of the reduced gradients plus the ranks' mean residual equals the sum
// of the exact averages.
//
// Costs: the Q AllReduce depends on the P one, so a bucket's reduction finishes only when DDP
// waits for it at the end of backward (the P AllReduces still overlap backward); two small GEMMs
// per matrix and an orthogonalization of (n, r) and (m, r). f32 CPU buckets only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/ddp/comm_hook.h"

namespace ringgrad::dist {

class PowerSgdState : public CommHookState {
 public:
  explicit PowerSgdState(PowerSgdOptions options);
  const PowerSgdOptions options;
  ResidualsByParameter residuals;        // with error feedback
  int64_t state_bytes() const override;  // residuals and the Qs kept for warm start
  // The residuals, the Qs, the step count and the seed counter: a resume continues bit-exact.
  StateDict local_state() const override;
  void load_local_state(const StateDict& state) override;

  // Steps begun (a step begins with bucket 0); PowerSGD runs once it reaches start_iteration.
  int64_t iteration() const { return iteration_; }
  // The Q kept for this parameter, (m, r) f32, after its last compressed step; undefined if none.
  Tensor q_of(const std::string& parameter) const;
  // Elements over every compressed step so far: what the buckets held, and what was sent instead.
  int64_t numel_before = 0, numel_after = 0;

  // The hook's body (low_precision_hook's counterpart): see Note [PowerSGD].
  HookWork reduce(ProcessGroup& group, GradBucket& bucket);

 private:
  Tensor q_for(const std::string& parameter, int64_t m, int r);
  int64_t iteration_ = -1;
  int64_t qs_made_ = 0;  // seeds the next new Q: random_seed + qs_made_
  std::vector<std::pair<std::string, Tensor>> qs_;
};

CommHook powersgd_hook(std::shared_ptr<PowerSgdState> state);

// Orthogonalizes the columns of a (rows, r) f32 matrix in place by Gram-Schmidt, as PyTorch's
// PowerSGD does: each column divided by its norm, then its projection removed from the columns
// after it. A column of zeros stays zeros (PyTorch divides by zero there, and NaNs follow).
void orthogonalize_columns(Tensor& matrix);

}  // namespace ringgrad::dist
