// A solution of the ZeRO-1 exercise. ringgrad's dist::ZeroOptimizer (dist/zero/) does the same on
// DDP's buckets, overlapped with backward, for any optimizer and dtype.
#include <cmath>

#include "autograd/engine.h"
#include "core/ops.h"
#include "learn/zero1/zero1.h"

namespace learn {

namespace rg = ringgrad;

Zero1Adam::Zero1Adam(std::vector<rg::Tensor> params, rg::dist::ProcessGroup& group, double lr)
    : params_(std::move(params)), group_(group), lr_(lr) {
  for (const rg::Tensor& p : params_) numel_ += p.numel();
  m_ = (numel_ + group_.size() - 1) / group_.size();
  exp_avg_ = rg::zeros({m_});
  exp_avg_sq_ = rg::zeros({m_});
}

size_t Zero1Adam::state_bytes() const { return exp_avg_.nbytes() + exp_avg_sq_.nbytes(); }

void Zero1Adam::step() {
  rg::NoGradGuard no_grad;
  const int N = group_.size(), r = group_.rank();
  // The flat gradient and parameters, padded with zeros to N m.
  std::vector<rg::Tensor> grads, values;
  for (const rg::Tensor& p : params_) {
    grads.push_back(p.grad().reshape({-1}));
    values.push_back(p.detach().reshape({-1}));
  }
  const rg::Tensor padding = rg::zeros({N * m_ - numel_});
  grads.push_back(padding);
  values.push_back(padding);
  const rg::Tensor flat_grad = rg::cat(grads), flat = rg::cat(values);

  // 1. This rank's m elements of the averaged gradient.
  rg::Tensor g = rg::empty({m_});
  group_.reduce_scatter(g, flat_grad, rg::dist::ReduceOp::avg)->wait();

  // 2. Adam on this rank's slice only (as optim::Adam: bias-corrected moments, eps outside the root).
  constexpr double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  ++t_;
  exp_avg_.mul_(beta1).add_(g, 1 - beta1);
  exp_avg_sq_.mul_(beta2).add_(g * g, 1 - beta2);
  const double step_size = lr_ / (1 - std::pow(beta1, t_));
  const rg::Tensor denom = (exp_avg_sq_ * (1 / (1 - std::pow(beta2, t_)))).sqrt() + eps;
  rg::Tensor slice = flat.narrow(0, r * m_, m_).contiguous();
  slice.add_(exp_avg_ / denom, -step_size);

  // 3. Every rank's updated slice, back into every parameter.
  rg::Tensor gathered = rg::empty({N, m_});  // row k: rank k's slice
  group_.allgather(gathered, slice)->wait();
  const rg::Tensor all = gathered.view({-1});
  int64_t offset = 0;
  for (rg::Tensor& p : params_) {
    p.detach().copy_(all.narrow(0, offset, p.numel()).view(p.shape()));
    offset += p.numel();
  }
}

}  // namespace learn
