// nn::DtypeHold: marks parameters whose dtype something built around them depends on, so that
// Module::to(dtype) refuses to change it instead of breaking that something in silence.
//
// Note [Parameters an optimizer holds]: an optimizer sizes its state for each parameter's dtype
// when it is built -- Adam gives an f16 parameter an f32 master copy, an f32 one none. Module::to
// converts parameters in place (the handles stay valid), so converting after the optimizer was built
// would leave an f16 parameter updated without a master (8 B of state per parameter instead of 12,
// every update rounded to f16). Optimizers therefore hold their parameters' dtypes for their
// lifetime, and Module::to(dtype) names the first held parameter it would change.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::nn {

class DtypeHold {
 public:
  // describe_holder: what to call the holder in an error ("optimizer Adam"); called only while the
  // hold lives.
  DtypeHold(const std::vector<Tensor>& params, std::function<std::string()> describe_holder);
  ~DtypeHold();
  DtypeHold(const DtypeHold&) = delete;
  DtypeHold& operator=(const DtypeHold&) = delete;

 private:
  std::function<std::string()> describe_;
  std::vector<const TensorImpl*> held_;
};

// What holds t's dtype ("optimizer Adam"), or empty when nothing does.
std::string dtype_holder(const Tensor& t);

}  // namespace ringgrad::nn
