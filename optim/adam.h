// Adam (Kingma & Ba) and AdamW (Loshchilov & Hutter), as torch.optim.Adam / AdamW:
//   g = grad (+ wd * p for Adam)          p *= 1 - lr * wd   (AdamW, decoupled)
//   m = b1 m + (1 - b1) g                 v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// f16/bf16 parameters update through an f32 master copy (see optim/optimizer.h); the moments are
// always f32 (f64 for f64 parameters).
#pragma once

#include "optim/optimizer.h"

namespace ringgrad::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // PyTorch's AdamW default
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  Adam(std::vector<ParamGroup> groups, AdamOptions options);
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  size_t state_bytes() const override;
  std::vector<std::pair<std::string, size_t>> state_bytes_by_kind() const override;
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled);
  void update() override;

 private:
  struct State {
    int64_t step = 0;
    Tensor master;      // f32 copy for f16/bf16 parameters
    Tensor exp_avg;     // m
    Tensor exp_avg_sq;  // v
  };
  AdamOptions options_;
  bool decoupled_;
  std::vector<State> state_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);
};

}  // namespace ringgrad::optim
