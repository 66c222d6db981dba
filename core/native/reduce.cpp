// Reductions: the reduced dims are moved last (a view), made dense (a copy only when needed), and
// handed to the backend as (rows = kept elements, cols = reduced elements).
#include <algorithm>

#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace ringgrad::native {

std::vector<int64_t> reduction_dims(const char* op, const Shape& dims, int64_t ndim) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    RG_CHECK(std::find(out.begin(), out.end(), w) == out.end(), op, "dimension ", d, " appears twice in ",
             shape_str(dims));
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Tensor reduce(RowReduction op, const Tensor& a, const Shape& dims, bool keepdim) {
  static const char* names[] = {"sum", "mean", "max", "argmax"};
  const char* name = names[static_cast<int>(op)];
  RG_CHECK(a.defined(), name, "undefined tensor argument");
  if (op == RowReduction::mean) {
    RG_CHECK(is_floating(a.dtype()), name, "needs a floating-point tensor, got ", a.desc());
  }
  const std::vector<int64_t> reduced = reduction_dims(name, dims, a.dim());
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);

  Shape perm(kept.begin(), kept.end()), out_shape;
  perm.insert(perm.end(), reduced.begin(), reduced.end());
  int64_t rows = 1, cols = 1;
  for (int64_t d : kept) rows *= a.size(d);
  for (int64_t d : reduced) cols *= a.size(d);
  for (int64_t d = 0; d < a.dim(); ++d) {
    const bool is_reduced = std::find(reduced.begin(), reduced.end(), d) != reduced.end();
    if (!is_reduced) out_shape.push_back(a.size(d));
    else if (keepdim) out_shape.push_back(1);
  }
  if (op == RowReduction::max || op == RowReduction::argmax) {
    RG_CHECK(cols > 0, name, "cannot reduce an empty dimension of ", a.desc());
  }
  profiler::OpScope record(name, 0,
                           static_cast<double>(a.nbytes()) +
                               static_cast<double>(rows) * static_cast<double>(a.element_size()));  // a in, out out
  // Summing the leading dims of a dense tensor (a bias gradient: (B*T, C) -> (C)): the kept
  // elements are the columns, so sum down them in place instead of copying the transpose (where the
  // device's backend can: the CPU's).
  const bool leading_reduced = !reduced.empty() && reduced.back() == static_cast<int64_t>(reduced.size()) - 1;
  if ((op == RowReduction::sum || op == RowReduction::mean) && leading_reduced && backend_has_reduce_cols(a.device()) &&
      a.is_contiguous() && !kept.empty()) {
    Tensor out = empty(out_shape, a.dtype(), a.device());
    if (rows > 0) backend_reduce_cols(a.device(), op, a.dtype(), a.raw_data(), out.raw_data(), cols, rows);
    return out;
  }
  // The permuted view shares storage; contiguous() copies only when the layout requires it.
  Shape pshape, pstrides;
  for (int64_t d : perm) pshape.push_back(a.size(d)), pstrides.push_back(a.stride(d));
  Tensor dense = contiguous(make_view(a.storage(), pshape, pstrides, a.offset(), a.dtype()));
  Tensor out = empty(out_shape, op == RowReduction::argmax ? DType::i64 : a.dtype(), a.device());
  if (rows > 0) backend_reduce_rows(a.device(), op, a.dtype(), dense.raw_data(), out.raw_data(), rows, cols);
  return out;
}

}  // namespace ringgrad::native
