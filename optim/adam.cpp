#include "optim/adam.h"

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"
#include "optim/fused.h"

namespace ringgrad::optim {
namespace {
std::vector<ParamGroup> one_group(std::vector<Tensor> params, double lr, double wd) {
  return {ParamGroup{std::move(params), lr, wd}};
}
AdamOptions from_w(const AdamWOptions& o) { return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}; }
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(one_group(std::move(params), options.lr, options.weight_decay), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam(std::move(groups), options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(std::move(groups)), options_(options), decoupled_(decoupled) {
  RG_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1 && options.eps >= 0,
           name(), "betas must be in [0, 1) and eps >= 0, got betas (", options.beta1, ", ", options.beta2, "), eps ",
           options.eps);
  for (const Tensor& p : parameters()) {
    State s;
    const DType sd = state_dtype(p.dtype());
    if (needs_master(p.dtype())) s.master = native::cast(p, DType::f32);
    s.exp_avg = zeros(p.shape(), {.dtype = sd, .device = p.device()});
    s.exp_avg_sq = zeros(p.shape(), {.dtype = sd, .device = p.device()});
    state_.push_back(s);
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(one_group(std::move(params), options.lr, options.weight_decay), from_w(options), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Adam(std::move(groups), from_w(options), true) {}

void Adam::update() {
  FusedUpdates updates;
  for_each_param_with_grad([&](const ParamGroup& group, const Tensor& p, const Tensor& grad, size_t i) {
    State& s = state_[i];
    ++s.step;
    updates.adam(p, grad, s.master, s.exp_avg, s.exp_avg_sq,
                 {group.lr, options_.beta1, options_.beta2, options_.eps, group.weight_decay, decoupled_, s.step});
  });
  updates.run();
}

size_t Adam::state_bytes() const {
  size_t n = 0;
  for (const State& s : state_)
    n += (s.master.defined() ? s.master.nbytes() : 0) + s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  return n;
}

std::vector<std::pair<std::string, size_t>> Adam::state_bytes_by_kind() const {
  size_t master = 0, moments = 0;
  for (const State& s : state_) {
    if (s.master.defined()) master += s.master.nbytes();
    moments += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  }
  std::vector<std::pair<std::string, size_t>> out;
  if (master > 0) out.emplace_back("master weights", master);
  if (moments > 0) out.emplace_back("moments", moments);
  return out;
}

nn::StateDict Adam::state_dict() const {
  nn::StateDict out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string key = std::to_string(i);
    out.emplace_back(key + ".step", scalar_tensor(static_cast<double>(state_[i].step), {.dtype = DType::f64}));
    out.emplace_back(key + ".exp_avg", state_[i].exp_avg);
    out.emplace_back(key + ".exp_avg_sq", state_[i].exp_avg_sq);
    if (state_[i].master.defined()) out.emplace_back(key + ".master", state_[i].master);
  }
  return out;
}

void Adam::load_state_dict(const nn::StateDict& state) {
  const std::vector<Tensor> params = parameters();
  std::vector<State> loaded(state_.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = std::to_string(i);
    const Shape& shape = params[i].shape();
    const DType sd = state_dtype(params[i].dtype());
    (void)find_state(state, key + ".step", "Adam", {});  // names the entry when it is missing
    loaded[i].step = state_int(state, key + ".step", "Adam");
    RG_CHECK(loaded[i].step >= 0, "Adam", "state entry '", key, ".step' is ", loaded[i].step, ", not a count >= 0");
    // Checkpoints hold CPU tensors; the state lives where its parameter does.
    const Device device = params[i].device();
    loaded[i].exp_avg = native::cast(find_state(state, key + ".exp_avg", "Adam", shape), sd).to(device);
    loaded[i].exp_avg_sq = native::cast(find_state(state, key + ".exp_avg_sq", "Adam", shape), sd).to(device);
    if (state_[i].master.defined())
      loaded[i].master = native::cast(find_state(state, key + ".master", "Adam", shape), DType::f32).to(device);
  }
  state_ = std::move(loaded);
}

}  // namespace ringgrad::optim
