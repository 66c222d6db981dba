// Fingerprints of a model's weights, printed at the end of a run: exact-resume checks compare the
// checksum bit for bit (tests/dist/gpt_mini_check.cmake); tools/same_as_one_rank.sh compares the
// norm of a multi-rank run with one process's, within rounding.
#pragma once

#include <cmath>

#include "core/ops.h"
#include "nn/module.h"

namespace ringgrad::examples {

struct ParameterFingerprint {
  double checksum = 0;  // the sum of every parameter, in f64
  double norm = 0;      // their L2 norm, in f64: no cancellation to magnify a small difference
};

inline ParameterFingerprint parameter_fingerprint(nn::Module& model) {
  ParameterFingerprint f;
  double squares = 0;
  for (const Tensor& p : model.parameters()) {
    const Tensor p64 = p.to(DType::f64);
    f.checksum += p64.sum().item();
    squares += (p64 * p64).sum().item();
  }
  f.norm = std::sqrt(squares);
  return f;
}

}  // namespace ringgrad::examples
