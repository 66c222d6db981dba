// Joining and indexing: cat (any device, built on copy_), and index_select / index_add, gather /
// scatter_add and one_hot, whose kernels the backend seam picks (core/cpu/indexing.cpp,
// core/cuda/indexing.cu). Index values are checked on the host for both (a GPU's are copied back
// first), so a bad index is a clear error, not a device-side fault.
#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace ringgrad::native {
namespace {

void check_index(const char* op, const Tensor& index, const Tensor& a) {
  RG_CHECK(index.defined() && index.dtype() == DType::i64, op, "index must be an i64 tensor, got ", index.desc());
  RG_CHECK(index.device() == a.device(), op, "index ", index.desc(), " and input ", a.desc(),
           " are on different devices");
}

// Elements before `dim`, along it, and after it, for a dense tensor of `shape`.
struct Split3 {
  int64_t outer = 1, mid = 1, inner = 1;
};
Split3 split3(const Shape& shape, int64_t dim) {
  Split3 s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) s.outer *= shape[d];
    else if (d == dim) s.mid = shape[d];
    else s.inner *= shape[d];
  }
  return s;
}

// t as a dense tensor of dtype dt: t itself when it already is one, else a copy (cast copies).
Tensor dense(const Tensor& t, DType dt) { return t.dtype() == dt ? contiguous(t) : cast(t, dt); }

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  RG_CHECK(!tensors.empty(), "cat", "needs at least one tensor");
  const Tensor& first = tensors[0];
  dim = wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_same_device_dtype("cat", first, t);
    bool same = t.dim() == first.dim();
    for (int64_t d = 0; same && d < t.dim(); ++d) same = d == dim || t.size(d) == first.size(d);
    RG_CHECK(same, "cat", "tensor ", i, " ", t.desc(), " does not match tensor 0 ", first.desc(), " outside dimension ",
             dim);
    shape[dim] += t.size(dim);
  }
  Tensor out = empty(shape, first.dtype(), first.device());
  profiler::OpScope record("cat", 0, 2 * static_cast<double>(out.nbytes()));  // a copy_ per input inside
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    copy_(slice(out, dim, at, at + t.size(dim), 1), t);
    at += t.size(dim);
  }
  return out;
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  check_index("index_select", index, a);
  RG_CHECK(index.dim() == 1, "index_select", "index must be 1-D, got ", index.desc());
  dim = wrap_dim(dim, a.dim(), "index_select");
  Tensor src = contiguous(a), idx = contiguous(index);
  Shape shape = a.shape();
  shape[dim] = idx.numel();
  Tensor out = empty(shape, a.dtype(), a.device());
  profiler::OpScope record("index_select", 0, static_cast<double>(2 * out.nbytes() + idx.nbytes()));
  const Split3 s = split3(a.shape(), dim);
  if (backend_checks_indices_on_host(idx.device())) {
    const int64_t* ip = idx.data<int64_t>();
    for (int64_t k = 0; k < idx.numel(); ++k)
      RG_CHECK(ip[k] >= 0 && ip[k] < s.mid, "index_select", "index[", k, "] = ", ip[k], " out of range for dimension ",
               dim, " of ", a.desc());
  }
  backend_index_select(a.device(), a.element_size(), src.raw_data(), idx.data<int64_t>(), out.raw_data(), s.outer,
                       s.mid, idx.numel(), s.inner);
  return out;
}

// The indices come from a forward index_select, already checked (on a GPU, the kernel skips any
// that the forward reported).
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  const Split3 d = split3(shape, dim);
  profiler::OpScope record("index_add", 0, static_cast<double>(2 * src.nbytes() + index.nbytes()));
  const DType ct = backend_accumulate_dtype(src.device(), src.dtype());
  Tensor out = empty(shape, ct, src.device());
  out.zero_();
  Tensor s = dense(src, ct), idx = contiguous(index);
  backend_index_add(src.device(), ct, out.raw_data(), idx.data<int64_t>(), s.raw_data(), d.outer, d.mid, idx.numel(),
                    d.inner);
  return out.dtype() == src.dtype() ? out : cast(out, src.dtype());
}

namespace {

// Checks every value of a dense index tensor against the size of `a` along `dim`; on the CPU only,
// a GPU's kernel checks its own (Note [Device-side index checks]).
void check_gather_index(const char* op, const Tensor& index, const Shape& a_shape, int64_t dim) {
  if (!backend_checks_indices_on_host(index.device())) return;
  const int64_t* ip = index.data<int64_t>();
  for (int64_t p = 0; p < index.numel(); ++p)
    RG_CHECK(ip[p] >= 0 && ip[p] < a_shape[dim], op, "index value ", ip[p], " out of range for dimension ", dim,
             " of size ", a_shape[dim]);
}

void check_gather_shapes(const char* op, const Tensor& a, int64_t dim, const Tensor& index) {
  RG_CHECK(index.dim() == a.dim(), op, "index ", index.desc(), " must have as many dims as the input ", a.desc());
  for (int64_t d = 0; d < a.dim(); ++d)
    RG_CHECK(d == dim || index.size(d) <= a.size(d), op, "index ", index.desc(), " is larger than input ", a.desc(),
             " in dimension ", d);
}

// The geometry the gather / scatter kernels walk (See GatherGeometry in core/kernels.h).
GatherGeometry gather_geometry(const char* op, const Tensor& index, const Shape& a_shape, const Shape& a_strides,
                               int64_t dim) {
  RG_CHECK(index.dim() <= GatherGeometry::kMaxDims, op, "the kernel takes at most ", GatherGeometry::kMaxDims,
           " dims, got index ", index.desc());
  GatherGeometry g;
  g.ndim = static_cast<int>(index.dim());
  g.dim = static_cast<int>(dim);
  g.dim_size = a_shape[dim];
  for (int64_t d = 0; d < index.dim(); ++d) {
    g.index_shape[d] = index.size(d);
    g.a_strides[d] = a_strides[d];
  }
  return g;
}

}  // namespace

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_index("gather", index, a);
  dim = wrap_dim(dim, a.dim(), "gather");
  check_gather_shapes("gather", a, dim, index);
  Tensor idx = contiguous(index);
  Tensor out = empty(index.shape(), a.dtype(), a.device());
  profiler::OpScope record("gather", 0, static_cast<double>(2 * out.nbytes() + idx.nbytes()));
  check_gather_index("gather", idx, a.shape(), dim);
  backend_gather(a.device(), a.element_size(), a.raw_data(), idx.data<int64_t>(), out.raw_data(), idx.numel(),
                 gather_geometry("gather", idx, a.shape(), a.strides(), dim));
  return out;
}

// The indices come from a forward gather, already checked.
Tensor scatter_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor idx = contiguous(index);
  profiler::OpScope record("scatter_add", 0, static_cast<double>(2 * src.nbytes() + idx.nbytes()));
  const DType ct = backend_accumulate_dtype(src.device(), src.dtype());
  Tensor out = empty(shape, ct, src.device());
  out.zero_();
  Tensor s = dense(src, ct);
  backend_scatter_add(src.device(), ct, out.raw_data(), idx.data<int64_t>(), s.raw_data(), idx.numel(),
                      gather_geometry("scatter_add", idx, out.shape(), out.strides(), dim));
  return out.dtype() == src.dtype() ? out : cast(out, src.dtype());
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  RG_CHECK(indices.defined() && indices.dtype() == DType::i64, "one_hot", "indices must be i64, got ", indices.desc());
  RG_CHECK(num_classes > 0, "one_hot", "num_classes must be positive, got ", num_classes);
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = empty(shape, DType::f64, indices.device());
  out.zero_();
  Tensor idx = contiguous(indices);
  if (backend_checks_indices_on_host(idx.device())) {
    const int64_t* ip = idx.data<int64_t>();
    for (int64_t i = 0; i < idx.numel(); ++i)
      RG_CHECK(ip[i] >= 0 && ip[i] < num_classes, "one_hot", "index ", ip[i], " at position ", i, " is not in [0, ",
               num_classes, ")");
  }
  backend_one_hot(indices.device(), idx.data<int64_t>(), out.data<double>(), idx.numel(), num_classes);
  return dtype == DType::f64 ? out : cast(out, dtype);
}

}  // namespace ringgrad::native
