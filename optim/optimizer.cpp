#include "optim/optimizer.h"

#include <algorithm>
#include <mutex>

#include "autograd/engine.h"
#include "core/native/native.h"

namespace ringgrad::optim {

namespace {

std::mutex g_checks_mutex;
std::vector<const StepCheck*> g_checks;  // in registration order

std::vector<Tensor> all_params(const std::vector<ParamGroup>& groups) {
  std::vector<Tensor> out;
  for (const auto& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

}  // namespace

Optimizer::Optimizer(std::vector<ParamGroup> groups)
    : groups_(std::move(groups)), dtype_hold_(all_params(groups_), [this] { return "optimizer " + name(); }) {
  RG_CHECK(!groups_.empty(), "optimizer", "needs at least one parameter group");
  for (const auto& g : groups_) {
    RG_CHECK(g.lr >= 0, "optimizer", "learning rate must be >= 0, got ", g.lr);
    for (const auto& p : g.params)
      RG_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()), "optimizer",
               "parameters must be floating leaf tensors, got ", p.desc());
  }
}

StepCheckHandle::StepCheckHandle(StepCheck check) : check_(std::move(check)) {
  std::lock_guard<std::mutex> lock(g_checks_mutex);
  g_checks.push_back(&check_);
}

StepCheckHandle::~StepCheckHandle() {
  std::lock_guard<std::mutex> lock(g_checks_mutex);
  g_checks.erase(std::find(g_checks.begin(), g_checks.end(), &check_));
}

void Optimizer::step() {
  std::vector<StepCheck> checks;
  {
    // Copied out, so that a check may register or drop checks (or throw) without the lock held.
    std::lock_guard<std::mutex> lock(g_checks_mutex);
    for (const StepCheck* c : g_checks) checks.push_back(*c);
  }
  for (const StepCheck& check : checks) check(*this);
  update();
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad(set_to_none);
}

std::vector<Tensor> Optimizer::parameters() const { return all_params(groups_); }

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
