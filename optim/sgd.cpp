#include "optim/sgd.h"

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "optim/fused.h"

namespace ringgrad::optim {
namespace {
std::vector<ParamGroup> one_group(std::vector<Tensor> params, double lr, double wd) {
  return {ParamGroup{std::move(params), lr, wd}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(one_group(std::move(params), options.lr, options.weight_decay), options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : Optimizer(std::move(groups)), options_(options) {
  RG_CHECK(options.momentum >= 0 && (!options.nesterov || (options.momentum > 0 && options.dampening == 0)), "SGD",
           "Nesterov momentum needs momentum > 0 and dampening 0 (got momentum ", options.momentum, ", dampening ",
           options.dampening, ")");
  for (const Tensor& p : parameters()) {
    State s;
    if (needs_master(p.dtype())) s.master = native::cast(p, DType::f32);
    if (options.momentum != 0) s.momentum = native::empty(p.shape(), state_dtype(p.dtype()), p.device());
    state_.push_back(s);
  }
}

void SGD::update() {
  FusedUpdates updates;
  for_each_param_with_grad([&](const ParamGroup& group, const Tensor& p, const Tensor& grad, size_t i) {
    State& s = state_[i];
    const bool first = !s.started;
    s.started = true;
    updates.sgd(p, grad, s.master, s.momentum,
                {group.lr, options_.momentum, options_.dampening, group.weight_decay, options_.nesterov, first});
  });
  updates.run();
}

size_t SGD::state_bytes() const {
  size_t n = 0;
  for (const State& s : state_) {
    if (s.master.defined()) n += s.master.nbytes();
    if (s.momentum.defined()) n += s.momentum.nbytes();
  }
  return n;
}

std::vector<std::pair<std::string, size_t>> SGD::state_bytes_by_kind() const {
  size_t master = 0, momentum = 0;
  for (const State& s : state_) {
    if (s.master.defined()) master += s.master.nbytes();
    if (s.momentum.defined()) momentum += s.momentum.nbytes();
  }
  std::vector<std::pair<std::string, size_t>> out;
  if (master > 0) out.emplace_back("master weights", master);
  if (momentum > 0) out.emplace_back("momentum", momentum);
  return out;
}

nn::StateDict SGD::state_dict() const {
  nn::StateDict out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string key = std::to_string(i);
    if (state_[i].master.defined()) out.emplace_back(key + ".master", state_[i].master);
    if (state_[i].momentum.defined() && state_[i].started)
      out.emplace_back(key + ".momentum_buffer", state_[i].momentum);
  }
  return out;
}

void SGD::load_state_dict(const nn::StateDict& state) {
  const std::vector<Tensor> params = parameters();
  std::vector<State> loaded(state_.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = std::to_string(i);
    if (state_[i].master.defined())
      loaded[i].master =
          native::cast(find_state(state, key + ".master", "SGD", params[i].shape()), DType::f32).to(params[i].device());
    for (const auto& [name, t] : state)
      if (name == key + ".momentum_buffer") {
        RG_CHECK(t.shape() == params[i].shape(), "SGD", "momentum buffer ", name, " has shape ", shape_str(t.shape()),
                 ", parameter has ", shape_str(params[i].shape()));
        loaded[i].momentum =
            native::cast(t, state_dtype(params[i].dtype())).to(params[i].device());  // beside its param
        loaded[i].started = true;
      }
    if (!loaded[i].started && state_[i].momentum.defined())
      loaded[i].momentum = native::empty(params[i].shape(), state_dtype(params[i].dtype()), params[i].device());
  }
  state_ = std::move(loaded);  // only after every entry checked out
}

}  // namespace ringgrad::optim
