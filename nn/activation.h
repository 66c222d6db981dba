// Parameter-free layers: ReLU, GELU, Flatten, Dropout.
#pragma once

#include <memory>

#include "autograd/activation_checkpoint.h"
#include "core/random.h"
#include "nn/functional.h"
#include "nn/module.h"

namespace ringgrad::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Tensor forward(const Tensor& x) override { return gelu(x); }  // tanh approximation
};

// (N, d1, d2, ...) -> (N, d1 * d2 * ...)
class Flatten : public Module {
 public:
  Flatten() : Module("Flatten") {}
  Tensor forward(const Tensor& x) override { return x.flatten(1); }
};

// Inverted dropout; identity in eval mode. Draws from `generator` when one is given (shared: the
// layer keeps it alive), else from dropout_generator(), whose stream differs per rank by default
// (Note [Dropout streams per rank], core/random.h).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, std::shared_ptr<Generator> generator = nullptr)
      : Module("Dropout"), p(p), generator_(std::move(generator)) {}
  Tensor forward(const Tensor& x) override {
    if (!generator_) return functional::dropout(x, p, is_training(), dropout_generator());
    autograd::replay_in_recompute(generator_);  // a checkpointed block's recompute draws the same
    return functional::dropout(x, p, is_training(), *generator_);
  }
  double p;

 private:
  std::shared_ptr<Generator> generator_;
};

}  // namespace ringgrad::nn
