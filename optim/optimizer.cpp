#include "optim/optimizer.h"

#include <algorithm>

#include "autograd/engine.h"
#include "core/native/native.h"

namespace ringgrad::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  RG_CHECK(!groups_.empty(), "optimizer", "needs at least one parameter group");
  for (const auto& g : groups_) {
    RG_CHECK(g.lr >= 0, "optimizer", "learning rate must be >= 0, got ", g.lr);
    for (const auto& p : g.params)
      RG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), "optimizer",
               "parameters must be floating leaf tensors, got ", p.desc());
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad(set_to_none);
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

void Optimizer::for_each_param_with_grad(
    const std::function<void(const ParamGroup&, const Tensor&, const Tensor&, size_t)>& fn) {
  NoGradGuard no_grad;
  size_t index = 0;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      const size_t i = index++;
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      grad = native::contiguous(grad.dtype() == p.dtype() ? grad : native::cast(grad, p.dtype()));
      fn(group, p, grad, i);
    }
  }
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

Tensor find_state(const nn::StateDict& state, const std::string& name, const char* optimizer,
                  const Shape& expected_shape) {
  auto it = std::find_if(state.begin(), state.end(), [&](const auto& p) { return p.first == name; });
  RG_CHECK(it != state.end(), optimizer, "state entry '", name, "' is missing");
  RG_CHECK(it->second.shape() == expected_shape, optimizer, "state entry '", name, "' has shape ",
           shape_str(it->second.shape()), ", expected ", shape_str(expected_shape));
  return it->second;
}

}  // namespace ringgrad::optim
