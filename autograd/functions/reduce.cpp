// Differentiable reductions. The backward of a reduction broadcasts g back over the reduced dims.
#include <algorithm>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {
namespace {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

// g: the reduction's output gradient. Reinserts the reduced dims as size 1 (when keepdim was false).
Tensor with_kept_dims(const Tensor& g, const std::vector<int64_t>& reduced, bool keepdim) {
  if (keepdim) return g;
  Tensor out = g;
  for (int64_t d : reduced) out = native::unsqueeze(out, d);  // ascending order keeps indices valid
  return out;
}

int64_t count_of(const Tensor& a, const std::vector<int64_t>& reduced) {
  int64_t n = 1;
  for (int64_t d : reduced) n *= a.size(d);
  return n;
}

}  // namespace

// out = sum over dims;  da = g broadcast over the reduced dims
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor out = native::reduce(RowReduction::sum, a, dims, keepdim);
  const auto reduced = native::reduction_dims("sum", dims, a.dim());
  record("sum", {out}, {a}, [shape = a.shape(), reduced, keepdim](const TensorList& g, const NeedsGrad&) {
    return TensorList{native::expand(with_kept_dims(g[0], reduced, keepdim), shape)};
  });
  return out;
}

// out = mean over dims;  da = g / n broadcast over the reduced dims
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  Tensor out = native::reduce(RowReduction::mean, a, dims, keepdim);
  const auto reduced = native::reduction_dims("mean", dims, a.dim());
  const double n = static_cast<double>(count_of(a, reduced));
  record("mean", {out}, {a}, [shape = a.shape(), reduced, keepdim, n](const TensorList& g, const NeedsGrad&) {
    Tensor scaled = native::unary(UnaryOp::affine, g[0], {1.0 / n, 0.0});
    return TensorList{native::expand(with_kept_dims(scaled, reduced, keepdim), shape)};
  });
  return out;
}

// Composite: sum((a - mean)^2) / (n - 1 if unbiased else n). Its gradient comes from its parts.
Tensor var(const Tensor& a, const Shape& dims, bool keepdim, bool unbiased) {
  const auto reduced = native::reduction_dims("var", dims, a.dim());
  const int64_t n = count_of(a, reduced);
  const int64_t denom = unbiased ? n - 1 : n;
  RG_CHECK(denom > 0, "var", "needs at least ", unbiased ? 2 : 1, " elements per reduction, got ", n, " for ",
           a.desc());
  Tensor centered = a - mean(a, dims, /*keepdim=*/true);
  return sum(centered * centered, dims, keepdim) * (1.0 / static_cast<double>(denom));
}

// out = max along dim;  da = g at the argmax position (first one on ties), 0 elsewhere
Tensor max(const Tensor& a, int64_t dim, bool keepdim) {
  dim = wrap_dim(dim, a.dim(), "max");
  Tensor out = native::reduce(RowReduction::max, a, {dim}, keepdim);
  if (!autograd::any_requires_grad({&a})) return out;
  Tensor idx = native::reduce(RowReduction::argmax, a, {dim}, /*keepdim=*/true);
  record("max", {out}, {a}, [shape = a.shape(), idx, dim, keepdim](const TensorList& g, const NeedsGrad&) {
    Tensor gk = keepdim ? g[0] : native::unsqueeze(g[0], dim);
    return TensorList{native::scatter_add(shape, dim, idx, gk)};
  });
  return out;
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return native::reduce(RowReduction::argmax, a, {dim}, keepdim);
}

// Sums the broadcast dims of `a` away until it has `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  const int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  RG_CHECK(lead >= 0, "sum_to", "cannot sum ", a.desc(), " to the larger shape ", shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < lead) dims.push_back(d);
    else if (shape[d - lead] == 1 && a.size(d) != 1) dims.push_back(d);
    else RG_CHECK(shape[d - lead] == a.size(d), "sum_to", "cannot sum ", a.desc(), " to ", shape_str(shape));
  }
  Tensor s = dims.empty() ? a : sum(a, dims, /*keepdim=*/true);
  return s.reshape(shape);
}

}  // namespace ringgrad
