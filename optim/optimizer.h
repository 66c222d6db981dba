// Optimizer base: parameter groups, zero_grad, learning-rate access, state for checkpoints, and the
// memory the optimizer holds.
//
// Mixed precision (see optim/adam.h): a parameter of dtype f16 or bf16 is updated through an f32 master
// copy that the optimizer owns; the rounded result is written back into the parameter. Gradients stay
// in the parameter's dtype. For Adam that is 2 (param) + 2 (grad) + 4 (master) + 8 (exp_avg,
// exp_avg_sq) = 16 bytes per parameter; state_bytes() reports the optimizer's share (12).
//
// Contract: step() runs the registered step checks (StepCheck below), then reads .grad of every parameter that has one (parameters without a gradient are
// skipped, as in PyTorch) and must run outside autograd (it uses NoGradGuard internally).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/dtype_hold.h"
#include "nn/module.h"
#include "nn/state_dict.h"

namespace ringgrad::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 1e-3;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Runs the step checks (below), then this optimizer's update.
  void step();
  virtual std::string name() const = 0;
  // Every parameter's .grad set to none (or zeroed). Virtual: an optimizer that holds gradients of
  // its own (dist::ZeroOptimizer's reduced blocks) clears those too.
  virtual void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Every parameter, in group order (the order state is saved in).
  std::vector<Tensor> parameters() const;
  void set_lr(double lr);  // all groups
  double lr() const { return groups_.at(0).lr; }

  // The gradients update() will read, for GradScaler::unscale_ to scale and check: every parameter's
  // .grad that is defined. An optimizer that steps only a shard of the parameters
  // (dist::ZeroOptimizer) returns the gradients of its shard.
  virtual std::vector<Tensor> step_gradients();
  // Whether an inf / NaN was found in the gradients of this step, given `found` on this rank: `found`
  // itself, unless the step is shared with other ranks that each see only their shard of the
  // gradients (dist::ZeroOptimizer asks them all, so that every rank skips together).
  virtual bool agree_on_found_inf(bool found) { return found; }

  // Bytes of optimizer state (master weights, moments, momentum buffers) held now.
  virtual size_t state_bytes() const = 0;
  // state_bytes() by kind, for memory reports: {"master weights", bytes}, {"moments", bytes}, ...
  // (kinds with no bytes left out). The parts add up to state_bytes().
  virtual std::vector<std::pair<std::string, size_t>> state_bytes_by_kind() const { return {{"state", state_bytes()}}; }
  // State as named tensors ("3.exp_avg" = parameter 3's first moment; scalars as 0-dim f64), and back.
  virtual nn::StateDict state_dict() const = 0;
  virtual void load_state_dict(const nn::StateDict& state) = 0;

 protected:
  // The update itself: reads .grad of every parameter that has one.
  virtual void update() = 0;

  // Calls fn(group, param, grad, index) for every parameter that has a gradient, with grad made dense
  // and of the parameter's dtype; index counts all parameters (with or without a gradient) in
  // parameters() order, so per-parameter state can be a vector. Runs under NoGradGuard.
  void for_each_param_with_grad(const std::function<void(const ParamGroup&, const Tensor&, const Tensor&, size_t)>& fn);

  std::vector<ParamGroup> groups_;

 private:
  // Note [Parameters an optimizer holds] (nn/dtype_hold.h): the parameters' dtypes stay as the
  // state was sized for, while this optimizer lives.
  nn::DtypeHold dtype_hold_;
};

// A check every Optimizer::step runs before it updates anything; it throws to refuse the step.
// The layers above the optimizers register them: DistributedDataParallel refuses a step after a
// backward that never synchronised (Note [A step after no_sync], dist/ddp/ddp.cpp).
using StepCheck = std::function<void(const Optimizer&)>;

// Registers `check` while the returned handle lives.
class StepCheckHandle {
 public:
  explicit StepCheckHandle(StepCheck check);
  ~StepCheckHandle();
  StepCheckHandle(const StepCheckHandle&) = delete;
  StepCheckHandle& operator=(const StepCheckHandle&) = delete;

 private:
  StepCheck check_;
};

// Optimizer state keyed by parameter name, as a training checkpoint stores it: "fc1.weight.exp_avg"
// rather than "0.exp_avg" (the names are `model`'s named_parameters()), and each group's
// hyperparameters as "param_groups.<g>.lr" / ".weight_decay" (a run that set the learning rate by
// hand resumes with it). Names survive what indices do not: parameters handed to the optimizer in
// another order, or a model that gained a parameter the optimizer does not hold. Every parameter
// of the optimizer must be one of the model's (an error names the one that is not).
nn::StateDict state_dict_by_name(const Optimizer& opt, const nn::Module& model);
// The inverse. Also reads state keyed by index (what Optimizer::state_dict writes, and checkpoints
// from before names), so older files load. An entry that names no parameter is an error.
void load_state_dict_by_name(Optimizer& opt, const nn::Module& model, const nn::StateDict& state);

// Looks up `name` in `state`; an error naming the optimizer when it is missing or mis-shaped.
Tensor find_state(const nn::StateDict& state, const std::string& name, const char* optimizer,
                  const Shape& expected_shape);

}  // namespace ringgrad::optim
