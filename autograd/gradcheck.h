// gradcheck: compares autograd's gradients with central finite differences computed in double.
//
// The inputs are converted to f64 copies that require grad; fn runs on them, and its output is
// reduced against a fixed random cotangent v (so non-scalar outputs are checked through
// sum(v * fn(x)), testing the full vector-Jacobian product). For each element of each input,
// (f(x + eps) - f(x - eps)) / (2 eps) is compared with the analytic gradient.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ringgrad {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;  // for the random cotangent
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch: input index, element, analytic vs numeric
};

// Inputs that are not floating (e.g. index tensors) are passed through unchanged and not checked.
// Inputs with requires_grad == false are passed as f64 but not checked either.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace ringgrad
