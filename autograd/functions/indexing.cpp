// Differentiable joining and indexing.
#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;

// out = cat(t_0, t_1, ...);  dt_i = the slice of g that t_i filled
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = native::cat(tensors, dim);
  const int64_t d = wrap_dim(dim, tensors[0].dim(), "cat");
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.size(d));
  record("cat", {out}, tensors, [sizes, d](const TensorList& g, const NeedsGrad& n) {
    TensorList grads;
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(n[i] ? native::slice(g[0], d, at, at + sizes[i], 1) : Tensor());
      at += sizes[i];
    }
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  RG_CHECK(!tensors.empty(), "stack", "needs at least one tensor");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (const Tensor& t : tensors) {
    RG_CHECK(t.shape() == tensors[0].shape(), "stack", "all tensors need one shape: ", tensors[0].desc(), " vs ",
             t.desc());
    expanded.push_back(t.unsqueeze(d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  RG_CHECK(split_size > 0, "split", "split_size must be positive, got ", split_size);
  dim = wrap_dim(dim, a.dim(), "split");
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < a.size(dim); start += split_size)
    pieces.push_back(a.narrow(dim, start, std::min(split_size, a.size(dim) - start)));
  return pieces;
}

// out = a.index_select(dim, index);  da = zeros, rows index[k] += g rows k
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  Tensor out = native::index_select(a, dim, index);
  const int64_t d = wrap_dim(dim, a.dim(), "index_select");
  record("index_select", {out}, {a},
         [shape = a.shape(), d, index = index.detach()](const TensorList& g, const NeedsGrad&) {
           return TensorList{native::index_add(shape, d, index, g[0])};
         });
  return out;
}

// out = a.gather(dim, index);  da = scatter_add of g at the gathered positions
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  Tensor out = native::gather(a, dim, index);
  const int64_t d = wrap_dim(dim, a.dim(), "gather");
  record("gather", {out}, {a}, [shape = a.shape(), d, index = index.detach()](const TensorList& g, const NeedsGrad&) {
    return TensorList{native::scatter_add(shape, d, index, g[0])};
  });
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  return native::one_hot(indices, num_classes, dtype);
}

}  // namespace ringgrad
