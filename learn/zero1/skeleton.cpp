// Your part of the ZeRO-1 exercise. Fill in the constructor's sizes and step(), then build and run
// learn_zero1_yours (learn/CMakeLists.txt says how).
#include <cstdio>

#include "core/ops.h"
#include "learn/zero1/zero1.h"

namespace learn {

namespace rg = ringgrad;

Zero1Adam::Zero1Adam(std::vector<rg::Tensor> params, rg::dist::ProcessGroup& group, double lr)
    : params_(std::move(params)), group_(group), lr_(lr) {
  // TODO(you): numel_ = Ψ (the parameters' elements), m_ = ceil(Ψ / N), and the two moments
  // (exp_avg_, exp_avg_sq_) as zeros of m_ elements -- this rank's state, 8 bytes per element.
}

size_t Zero1Adam::state_bytes() const { return exp_avg_.defined() ? exp_avg_.nbytes() + exp_avg_sq_.nbytes() : 0; }

void Zero1Adam::step() {
  // TODO(you), under rg::NoGradGuard:
  //  1. concatenate the parameters' gradients (p.grad().reshape({-1})) and N m_ - Ψ zeros into one
  //     flat tensor, and reduce_scatter it with ReduceOp::avg into a tensor of m_ elements
  //     (group_.reduce_scatter(out, in, op)->wait(): dist/process_group.h);
  //  2. Adam on those m_ elements of the flat parameters (rank r's: [r m_, (r + 1) m_)): t_ += 1;
  //     m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g^2; p -= lr m / (1 - 0.9^t) / (sqrt(v / (1 - 0.999^t)) + 1e-8);
  //  3. allgather the updated slices (group_.allgather(out of shape (N, m_), in of m_)) and copy each
  //     parameter's range back into it (p.detach().copy_(...)).
  static bool said = false;
  if (!said && group_.rank() == 0)
    std::printf("missing: Zero1Adam::step does nothing yet (learn/zero1/skeleton.cpp)\n");
  said = true;
}

}  // namespace learn
