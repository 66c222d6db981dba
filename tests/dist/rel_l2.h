// The relative L2 difference ||a - b|| / ||a|| of two tensors, as the ZeRO tests compare replicas:
// elementwise ratios would blow up at values Adam has driven near zero, where one rounding of a sum
// moves the sign of a tiny update.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/tensor.h"

inline double rel_l2(const ringgrad::Tensor& a, const ringgrad::Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double diff = 0, norm = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    diff += (x[k] - y[k]) * (x[k] - y[k]);
    norm += x[k] * x[k];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}
