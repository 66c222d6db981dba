#include "optim/clip_grad.h"

#include <cmath>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "optim/device_sums.h"

namespace ringgrad::optim {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  // The squares summed on each gradient's device into one f64 scalar there, in parameter order, and
  // read back once per device: one host synchronisation per step on a GPU, not one per parameter.
  // The same f64 additions in the same order as summing the scalars on the host.
  DeviceSums sums;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = native::cast(g, DType::f64);
    add_on_device(sums, native::reduce(RowReduction::sum, native::binary(BinaryOp::mul, g64, g64), {}, false));
  }
  double total_sq = 0;
  for (const auto& [device, sum] : sums) total_sq += sum.item();
  const double norm = std::sqrt(total_sq);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) native::unary_(UnaryOp::affine, g, {coef, 0.0});
    }
  }
  return norm;
}

}  // namespace ringgrad::optim
