// Joining and indexing: cat (any device, built on copy_), and index_select / index_add, gather /
// scatter_add and one_hot: CPU kernels here, CUDA kernels in core/cuda/indexing.cu. Index values are
// checked on the host for both (a GPU's are copied back first), so a bad index is a clear error,
// not a device-side fault.
#include <cstring>

#include "core/native/backend.h"
#include "core/native/native.h"

namespace ringgrad::native {
namespace {

void check_index(const char* op, const Tensor& index, const Tensor& a) {
  RG_CHECK(index.defined() && index.dtype() == DType::i64, op, "index must be an i64 tensor, got ",
           index.desc());
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

// dst[i] += src[i] for n elements of a floating type.
void add_elements(DType t, void* dst, const void* src, int64_t n) {
  dispatch_floating(t, [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst);
    const T* s = static_cast<const T*>(src);
    for (int64_t i = 0; i < n; ++i) d[i] = store_as<T>(load(d[i]) + load(s[i]));
  });
}

#ifdef RINGGRAD_WITH_CUDA
// The f32 / f64 dtype the CUDA adding kernels (atomics) run in for dtype t.
DType cuda_add_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
#endif

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
    RG_CHECK(same, "cat", "tensor ", i, " ", t.desc(), " does not match tensor 0 ", first.desc(),
             " outside dimension ", dim);
    shape[dim] += t.size(dim);
  }
  Tensor out = empty(shape, first.dtype(), first.device());
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
  const Split3 s = split3(a.shape(), dim);
  const Tensor host_idx = idx.to(Device::cpu());
  const int64_t* ip = host_idx.data<int64_t>();
  for (int64_t k = 0; k < idx.numel(); ++k)
    RG_CHECK(ip[k] >= 0 && ip[k] < s.mid, "index_select", "index[", k, "] = ", ip[k],
             " out of range for dimension ", dim, " of ", a.desc());
  if (a.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::index_select(a.element_size(), src.raw_data(), idx.data<int64_t>(), out.raw_data(), s.outer, s.mid,
                       idx.numel(), s.inner);
#endif
    return out;
  }
  const size_t row_bytes = static_cast<size_t>(s.inner) * a.element_size();
  const char* sp = static_cast<const char*>(src.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t k = 0; k < idx.numel(); ++k)
      std::memcpy(op + (o * idx.numel() + k) * row_bytes, sp + (o * s.mid + ip[k]) * row_bytes, row_bytes);
  return out;
}

// The indices come from a forward index_select, already checked.
Tensor index_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  const Split3 d = split3(shape, dim);
  if (src.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    const DType ct = cuda_add_dtype(src.dtype());
    Tensor out = empty(shape, ct, src.device());
    out.zero_();
    Tensor s = contiguous(cast(src, ct)), idx = contiguous(index);
    cuda::index_add(ct, out.raw_data(), idx.data<int64_t>(), s.raw_data(), d.outer, d.mid, idx.numel(), d.inner);
    return out.dtype() == src.dtype() ? out : cast(out, src.dtype());
#endif
  }
  Tensor out = empty(shape, src.dtype(), src.device());
  out.zero_();
  Tensor s = contiguous(src), idx = contiguous(index);
  const int64_t k_count = idx.numel();
  const int64_t* ip = idx.data<int64_t>();
  const size_t esize = src.element_size();
  char* op = static_cast<char*>(out.raw_data());
  const char* sp = static_cast<const char*>(s.raw_data());
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t k = 0; k < k_count; ++k)
      add_elements(src.dtype(), op + ((o * d.mid + ip[k]) * d.inner) * esize,
                   sp + ((o * k_count + k) * d.inner) * esize, d.inner);
  return out;
}

namespace {

// Calls fn(position in index, element offset in a tensor of `a_strides`) for every element of a
// dense index tensor, replacing the coordinate along `dim` by the index value.
template <class Fn>
void for_each_gather_position(const char* op, const Tensor& index, const Shape& a_shape,
                              const Shape& a_strides, int64_t dim, Fn&& fn) {
  const int64_t* ip = index.data<int64_t>();
  const int64_t ndim = index.dim();
  for (int64_t p = 0; p < index.numel(); ++p) {
    int64_t rest = p, offset = 0;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      int64_t coord = rest % index.size(d);
      rest /= index.size(d);
      if (d == dim) {
        coord = ip[p];
        RG_CHECK(coord >= 0 && coord < a_shape[d], op, "index value ", coord, " out of range for dimension ",
                 dim, " of size ", a_shape[d]);
      }
      offset += coord * a_strides[d];
    }
    fn(p, offset);
  }
}

void check_gather_shapes(const char* op, const Tensor& a, int64_t dim, const Tensor& index) {
  RG_CHECK(index.dim() == a.dim(), op, "index ", index.desc(), " must have as many dims as the input ",
           a.desc());
  for (int64_t d = 0; d < a.dim(); ++d)
    RG_CHECK(d == dim || index.size(d) <= a.size(d), op, "index ", index.desc(), " is larger than input ",
             a.desc(), " in dimension ", d);
}

}  // namespace

#ifdef RINGGRAD_WITH_CUDA
// The geometry the CUDA gather / scatter kernels walk (See GatherGeometry in core/kernels.h).
cuda::GatherGeometry gather_geometry(const char* op, const Tensor& index, const Shape& a_strides, int64_t dim) {
  RG_CHECK(index.dim() <= cuda::GatherGeometry::kMaxDims, op, "the CUDA kernel takes at most ",
           cuda::GatherGeometry::kMaxDims, " dims, got index ", index.desc());
  cuda::GatherGeometry g;
  g.ndim = static_cast<int>(index.dim());
  g.dim = static_cast<int>(dim);
  for (int64_t d = 0; d < index.dim(); ++d) {
    g.index_shape[d] = index.size(d);
    g.a_strides[d] = a_strides[d];
  }
  return g;
}
#endif

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_index("gather", index, a);
  dim = wrap_dim(dim, a.dim(), "gather");
  check_gather_shapes("gather", a, dim, index);
  Tensor idx = contiguous(index);
  Tensor out = empty(index.shape(), a.dtype(), a.device());
  const size_t esize = a.element_size();
  // Checks every index value (on the host), and on the CPU also copies the elements.
  const bool on_cpu = a.device().is_cpu();
  const Tensor host_idx = idx.to(Device::cpu());
  const char* ap = static_cast<const char*>(a.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  for_each_gather_position("gather", host_idx, a.shape(), a.strides(), dim, [&](int64_t p, int64_t off) {
    if (on_cpu) std::memcpy(op + p * esize, ap + off * static_cast<int64_t>(esize), esize);
  });
  if (!on_cpu) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::gather(esize, a.raw_data(), idx.data<int64_t>(), out.raw_data(), idx.numel(),
                 gather_geometry("gather", idx, a.strides(), dim));
#endif
  }
  return out;
}

// The indices come from a forward gather, already checked.
Tensor scatter_add(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor idx = contiguous(index);
  if (src.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    const DType ct = cuda_add_dtype(src.dtype());
    Tensor out = empty(shape, ct, src.device());
    out.zero_();
    Tensor s = contiguous(cast(src, ct));
    cuda::scatter_add(ct, out.raw_data(), idx.data<int64_t>(), s.raw_data(), idx.numel(),
                      gather_geometry("scatter_add", idx, out.strides(), dim));
    return out.dtype() == src.dtype() ? out : cast(out, src.dtype());
#endif
  }
  Tensor out = empty(shape, src.dtype(), src.device());
  out.zero_();
  Tensor s = contiguous(src);
  const size_t esize = src.element_size();
  char* op = static_cast<char*>(out.raw_data());
  const char* sp = static_cast<const char*>(s.raw_data());
  for_each_gather_position("scatter_add", idx, shape, out.strides(), dim, [&](int64_t p, int64_t off) {
    add_elements(src.dtype(), op + off * static_cast<int64_t>(esize), sp + p * esize, 1);
  });
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype) {
  RG_CHECK(indices.defined() && indices.dtype() == DType::i64, "one_hot", "indices must be i64, got ",
           indices.desc());
  RG_CHECK(num_classes > 0, "one_hot", "num_classes must be positive, got ", num_classes);
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = empty(shape, DType::f64, indices.device());
  out.zero_();
  Tensor idx = contiguous(indices);
  const Tensor host_idx = idx.to(Device::cpu());
  const int64_t* ip = host_idx.data<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    RG_CHECK(ip[i] >= 0 && ip[i] < num_classes, "one_hot", "index ", ip[i], " at position ", i,
             " is not in [0, ", num_classes, ")");
  if (indices.device().is_cuda()) {
#ifdef RINGGRAD_WITH_CUDA
    cuda::one_hot(idx.data<int64_t>(), out.data<double>(), idx.numel(), num_classes);
#endif
  } else {
    double* op = out.data<double>();
    for (int64_t i = 0; i < idx.numel(); ++i) op[i * num_classes + ip[i]] = 1.0;
  }
  return dtype == DType::f64 ? out : cast(out, dtype);
}

}  // namespace ringgrad::native
