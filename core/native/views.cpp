// Views: new shape/strides/offset over the same storage. No data moves, no autograd is recorded
// (autograd/functions/views.cpp wraps these with their backward).
#include <algorithm>

#include "core/native/native.h"

namespace ringgrad::native {

Tensor as_strided(const Tensor& a, const Shape& shape, const Shape& strides, int64_t offset) {
  return make_view(a.storage(), shape, strides, offset, a.dtype());
}

Shape infer_view_shape(const char* op, const Tensor& a, Shape shape) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      RG_CHECK(infer_at < 0, op, "only one dimension can be -1, got ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      RG_CHECK(shape[i] >= 0, op, "invalid shape ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    RG_CHECK(known != 0 && a.numel() % known == 0, op, "shape ", shape_str(shape), " is invalid for ", a.desc(), " (",
             a.numel(), " elements)");
    shape[infer_at] = a.numel() / known;
  }
  RG_CHECK(shape_numel(shape) == a.numel(), op, "shape ", shape_str(shape), " is invalid for ", a.desc(), " (",
           a.numel(), " elements)");
  return shape;
}

// Walks the old dims right to left in chunks that are contiguous within themselves; the new dims
// covering a chunk's elements get strides inside that chunk. A new dim that would straddle two
// chunks makes the view impossible without a copy (the rule torch.view uses).
Shape view_strides(const Tensor& a, const Shape& shape) {
  if (a.numel() == 0 || a.is_contiguous()) return contiguous_strides(shape);
  const Shape& old_shape = a.shape();
  const Shape& old_strides = a.strides();
  Shape strides(shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    const bool chunk_ends = d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return {};
    if (d > 0) {
      chunk_base_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return {};
  return strides;
}

Tensor view(const Tensor& a, const Shape& shape_in) {
  const Shape shape = infer_view_shape("view", a, shape_in);
  const Shape strides = view_strides(a, shape);
  RG_CHECK(!strides.empty() || shape.empty(), "view", "cannot view ", a.desc(), " with strides ",
           shape_str(a.strides()), " as ", shape_str(shape),
           " without a copy; use reshape() (which copies) or contiguous() first");
  return as_strided(a, shape, strides, a.offset());
}

Tensor permute(const Tensor& a, const Shape& dims) {
  RG_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), "permute", "needs ", a.dim(), " dims for ", a.desc(), ", got ",
           shape_str(dims));
  Shape shape(dims.size()), strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], a.dim(), "permute");
    RG_CHECK(!seen[d], "permute", "dimension ", d, " repeated in ", shape_str(dims));
    seen[d] = true;
    shape[i] = a.size(d);
    strides[i] = a.stride(d);
  }
  return as_strided(a, shape, strides, a.offset());
}

Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  d0 = wrap_dim(d0, a.dim(), "transpose");
  d1 = wrap_dim(d1, a.dim(), "transpose");
  Shape shape = a.shape(), strides = a.strides();
  std::swap(shape[d0], shape[d1]);
  std::swap(strides[d0], strides[d1]);
  return as_strided(a, shape, strides, a.offset());
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap_dim(dim, a.dim(), "slice");
  const int64_t n = a.size(dim);
  RG_CHECK(step > 0, "slice", "step must be positive, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = a.shape(), strides = a.strides();
  shape[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  return as_strided(a, shape, strides, a.offset() + start * a.stride(dim));
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  dim = wrap_dim(dim, a.dim(), "select");
  const int64_t n = a.size(dim);
  RG_CHECK(index >= -n && index < n, "select", "index ", index, " out of range for dimension ", dim, " of ", a.desc());
  if (index < 0) index += n;
  Shape shape = a.shape(), strides = a.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return as_strided(a, shape, strides, a.offset() + index * a.stride(dim));
}

Tensor expand(const Tensor& a, const Shape& shape) {
  RG_CHECK(shape.size() >= static_cast<size_t>(a.dim()), "expand", "cannot expand ", a.desc(), " to ", shape_str(shape),
           ": fewer dims");
  const size_t lead = shape.size() - a.dim();
  Shape out_shape(shape.size()), strides(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      RG_CHECK(shape[i] >= 0, "expand", "invalid target ", shape_str(shape));
      out_shape[i] = shape[i];
      continue;
    }
    const int64_t have = a.size(i - lead), want = shape[i] == -1 ? have : shape[i];
    RG_CHECK(have == want || have == 1, "expand", "cannot expand ", a.desc(), " to ", shape_str(shape), ": dimension ",
             i, " is ", have, ", not 1 or ", want);
    out_shape[i] = want;
    strides[i] = have == want ? a.stride(i - lead) : 0;
  }
  return as_strided(a, out_shape, strides, a.offset());
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  Shape shape, strides;
  const int64_t only = dim == -100 ? -1 : wrap_dim(dim, a.dim(), "squeeze");
  for (int64_t d = 0; d < a.dim(); ++d) {
    const bool drop = a.size(d) == 1 && (only < 0 || d == only);
    if (!drop) shape.push_back(a.size(d)), strides.push_back(a.stride(d));
  }
  return as_strided(a, shape, strides, a.offset());
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  dim = wrap_dim(dim, a.dim() + 1, "unsqueeze");
  Shape shape = a.shape(), strides = a.strides();
  const int64_t stride = dim < a.dim() ? a.stride(dim) * a.size(dim) : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return as_strided(a, shape, strides, a.offset());
}

}  // namespace ringgrad::native
