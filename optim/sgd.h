// SGD with momentum, Nesterov momentum and (coupled, L2) weight decay, as torch.optim.SGD:
//   g = grad + wd * p
//   buf = g (first step) | momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf          (when momentum != 0)
//   p -= lr * g
#pragma once

#include "optim/optimizer.h"

namespace ringgrad::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  // Groups carry their own lr and weight_decay; the other options apply to all.
  SGD(std::vector<ParamGroup> groups, SGDOptions options);
  std::string name() const override { return "SGD"; }
  size_t state_bytes() const override;
  std::vector<std::pair<std::string, size_t>> state_bytes_by_kind() const override;
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 protected:
  void update() override;

 private:
  struct State {
    Tensor master;         // f32 copy for f16/bf16 parameters
    Tensor momentum;       // allocated up front when momentum != 0, so state_bytes() is known early
    bool started = false;  // the first step sets the buffer to the gradient
  };
  SGDOptions options_;
  std::vector<State> state_;  // one per parameter, in parameters() order
};

}  // namespace ringgrad::optim
