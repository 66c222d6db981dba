// Differentiable views and conversions (Tensor methods). A view's backward maps the gradient back
// onto the input's shape: the inverse permutation, a reshape, zeros with the slice filled in, or a
// sum over broadcast dims.
#include <numeric>

#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

namespace {

// Records a view whose gradient is g reshaped to the input's shape.
Tensor reshape_like_backward(const char* name, const Tensor& out, const Tensor& a) {
  record(name, {out}, {a},
         [shape = a.shape()](const TensorList& g, const NeedsGrad&) { return TensorList{g[0].reshape(shape)}; });
  return out;
}

// Records a view that picks part of the input: the gradient is zeros with g written through the same
// view (`pick` re-applies it to the zero tensor).
template <class Pick>
Tensor part_backward(const char* name, const Tensor& out, const Tensor& a, Pick pick) {
  record(name, {out}, {a}, [shape = a.shape(), pick](const TensorList& g, const NeedsGrad&) {
    Tensor da = zeros(shape, {.dtype = g[0].dtype(), .device = g[0].device()});
    native::copy_(pick(da), g[0]);
    return TensorList{da};
  });
  return out;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  return reshape_like_backward("view", native::view(*this, shape), *this);
}

Tensor Tensor::reshape(const Shape& shape_in) const {
  const Shape shape = native::infer_view_shape("reshape", *this, shape_in);
  if (shape == this->shape()) return *this;
  if (!native::view_strides(*this, shape).empty() || shape.empty()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  Tensor out = native::transpose(*this, d0, d1);
  record("transpose", {out}, {*this},
         [d0, d1](const TensorList& g, const NeedsGrad&) { return TensorList{native::transpose(g[0], d0, d1)}; });
  return out;
}

Tensor Tensor::t() const {
  RG_CHECK(dim() == 2, "t", "expects a 2-D tensor, got ", desc());
  return transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  Tensor out = native::permute(*this, dims);
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
  record("permute", {out}, {*this},
         [inverse](const TensorList& g, const NeedsGrad&) { return TensorList{native::permute(g[0], inverse)}; });
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  Tensor out = native::slice(*this, d, start, end, step);
  return part_backward("slice", out, *this,
                       [d, start, end, step](const Tensor& z) { return native::slice(z, d, start, end, step); });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  if (start < 0) start += size(d);
  RG_CHECK(start >= 0 && length >= 0 && start + length <= size(d), "narrow", "range [", start, ", ", start + length,
           ") out of bounds for dimension ", d, " of ", desc());
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  Tensor out = native::select(*this, d, index);
  return part_backward("select", out, *this, [d, index](const Tensor& z) { return native::select(z, d, index); });
}

Tensor Tensor::expand(const Shape& shape) const {
  Tensor out = native::expand(*this, shape);
  record("expand", {out}, {*this}, [in_shape = this->shape()](const TensorList& g, const NeedsGrad&) {
    return TensorList{sum_to(g[0], in_shape)};
  });
  return out;
}

Tensor Tensor::squeeze() const { return reshape_like_backward("squeeze", native::squeeze(*this, -100), *this); }
Tensor Tensor::squeeze(int64_t d) const { return reshape_like_backward("squeeze", native::squeeze(*this, d), *this); }
Tensor Tensor::unsqueeze(int64_t d) const {
  return reshape_like_backward("unsqueeze", native::unsqueeze(*this, d), *this);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  RG_CHECK(start_dim <= end_dim, "flatten", "start_dim ", start_dim, " > end_dim ", end_dim, " for ", desc());
  Shape shape(this->shape().begin(), this->shape().begin() + start_dim);
  int64_t folded = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) folded *= size(d);
  shape.push_back(folded);
  shape.insert(shape.end(), this->shape().begin() + end_dim + 1, this->shape().end());
  return reshape(shape);
}

// Identity for the gradient: copies (to dense, another dtype or device) map g back the same way.
Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = native::contiguous(*this);
  record("contiguous", {out}, {*this}, [](const TensorList& g, const NeedsGrad&) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = native::cast(*this, dtype());
  record("clone", {out}, {*this}, [](const TensorList& g, const NeedsGrad&) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = native::cast(*this, target);
  record("to_dtype", {out}, {*this},
         [from = dtype()](const TensorList& g, const NeedsGrad&) { return TensorList{native::cast(g[0], from)}; });
  return out;
}

// Not differentiable: a pinned copy is data staging, not a step of the computation.
Tensor Tensor::pin_memory() const { return native::pin_memory(*this); }
bool Tensor::is_pinned() const { return storage()->pinned(); }

Tensor Tensor::to(Device target, bool non_blocking) const {
  if (target == device()) return *this;
  Tensor out = native::to_device(*this, target, non_blocking);
  record("to_device", {out}, {*this}, [from = device()](const TensorList& g, const NeedsGrad&) {
    return TensorList{native::to_device(g[0], from)};
  });
  return out;
}

}  // namespace ringgrad
