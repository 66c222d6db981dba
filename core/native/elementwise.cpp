// Elementwise front ends: broadcasting, argument checks, output allocation, and the strided operand
// description (ElementwiseArgs) the kernels of every backend consume.
#include <algorithm>

#include "core/native/backend.h"
#include "core/native/native.h"
#include "core/profiler.h"

namespace ringgrad {

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg",     "exp",  "log",  "sqrt", "rsqrt", "abs",    "tanh",
                                "sigmoid", "relu", "gelu", "pow",  "clamp", "affine", "fill"};
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add",
                                "sub",
                                "mul",
                                "div",
                                "maximum",
                                "minimum",
                                "relu_backward",
                                "gelu_backward",
                                "tanh_backward",
                                "sigmoid_backward",
                                "eq",
                                "ne",
                                "lt",
                                "le",
                                "gt",
                                "ge"};
  return names[static_cast<int>(op)];
}

namespace native {

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) RG_CHECK(s >= 0, "empty", "negative dimension in shape ", shape_str(shape));
  size_t nbytes = 0;
  RG_CHECK(!__builtin_mul_overflow(static_cast<size_t>(shape_numel(shape)), dtype_size(dtype), &nbytes), "empty",
           "shape ", shape_str(shape), " of ", dtype_name(dtype), " needs more than 2^64 bytes");
  return make_view(std::make_shared<Storage>(nbytes, device), shape, contiguous_strides(shape), 0, dtype);
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    RG_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast: dimension ", i, " is ", da, " vs ", db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_same_device_dtype(const char* op, const Tensor& a, const Tensor& b, bool same_dtype) {
  RG_CHECK(a.defined() && b.defined(), op, "undefined tensor argument");
  RG_CHECK(a.device() == b.device(), op, "tensors on different devices: a ", a.desc(), ", b ", b.desc());
  RG_CHECK(!same_dtype || a.dtype() == b.dtype(), op, "dtypes differ: a ", a.desc(), ", b ", b.desc(),
           "; convert one with .to(DType)");
}

namespace {

// Describes `out` and `inputs` (broadcast to out's shape) for a kernel: strides become 0 on broadcast
// dims, size-1 dims are dropped, and adjacent dims that are contiguous in every operand are merged,
// so most calls reach the kernel as one flat loop.
ElementwiseArgs make_args(const char* op, const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  const Shape& shape = out.shape();
  const int ndim = static_cast<int>(shape.size());
  const int nops = 1 + static_cast<int>(inputs.size());
  std::vector<std::vector<int64_t>> strides(nops, std::vector<int64_t>(ndim, 0));
  std::vector<const Tensor*> ops{&out};
  ops.insert(ops.end(), inputs.begin(), inputs.end());
  for (int k = 0; k < nops; ++k) {
    const Tensor& t = *ops[k];
    const int offset = ndim - static_cast<int>(t.dim());
    RG_CHECK(offset >= 0, op, "input ", t.desc(), " has more dims than the result ", shape_str(shape));
    for (int d = 0; d < t.dim(); ++d) {
      const int64_t size = t.shape()[d];
      RG_CHECK(size == shape[d + offset] || size == 1, op, "input ", t.desc(), " cannot be broadcast to ",
               shape_str(shape));
      strides[k][d + offset] = size == 1 ? 0 : t.strides()[d];
    }
  }
  // Keep dims of size > 1, merging a dim into the previous kept one when every operand allows it.
  ElementwiseArgs args;
  args.noperands = nops;
  args.numel = out.numel();
  for (int k = 0; k < nops; ++k) args.data[k] = ops[k]->raw_data();
  std::vector<int64_t> kept_shape;
  std::vector<std::vector<int64_t>> kept(nops);
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    bool mergeable = !kept_shape.empty();
    for (int k = 0; k < nops && mergeable; ++k) mergeable = kept[k].back() == strides[k][d] * shape[d];
    if (mergeable) {
      kept_shape.back() *= shape[d];
      for (int k = 0; k < nops; ++k) kept[k].back() = strides[k][d];
    } else {
      kept_shape.push_back(shape[d]);
      for (int k = 0; k < nops; ++k) kept[k].push_back(strides[k][d]);
    }
  }
  if (kept_shape.empty()) {  // zero-dim or all-ones: one element (or none)
    kept_shape.push_back(args.numel);
    for (int k = 0; k < nops; ++k) kept[k].push_back(1);
  }
  args.ndim = static_cast<int>(kept_shape.size());
  args.contiguous = args.ndim == 1;
  for (int d = 0; d < args.ndim; ++d) {
    args.shape[d] = kept_shape[d];
    for (int k = 0; k < nops; ++k) {
      args.strides[k][d] = kept[k][d];
      if (args.ndim == 1 && kept[k][d] != 1) args.contiguous = false;
    }
  }
  return args;
}

void check_floating(const char* op, const Tensor& a) {
  RG_CHECK(is_floating(a.dtype()), op, "needs a floating-point tensor, got ", a.desc());
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& a, ScalarArgs s) {
  const char* name = unary_op_name(op);
  RG_CHECK(a.defined(), name, "undefined tensor argument");
  if (unary_op_needs_floating(op)) check_floating(name, a);
  profiler::OpScope record(name, 0, 2 * static_cast<double>(a.nbytes()));  // a in, out out
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  backend_unary(a.device(), op, s, a.dtype(), make_args(name, out, {&a}));
  return out;
}

void unary_(UnaryOp op, const Tensor& self, ScalarArgs s) {
  const char* name = unary_op_name(op);
  if (unary_op_needs_floating(op)) check_floating(name, self);
  // self read and written; a fill only writes.
  profiler::OpScope record(name, 0, static_cast<double>(self.nbytes()) * (op == UnaryOp::fill ? 1 : 2));
  backend_unary(self.device(), op, s, self.dtype(), make_args(name, self, {&self}));
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_same_device_dtype(name, a, b);
  if (binary_op_needs_floating(op)) check_floating(name, a);
  const Shape shape = broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = empty(shape, is_comparison(op) ? DType::u8 : a.dtype(), a.device());
  profiler::OpScope record(name, 0, static_cast<double>(a.nbytes() + b.nbytes() + out.nbytes()));
  backend_binary(a.device(), op, a.dtype(), make_args(name, out, {&a, &b}));
  return out;
}

void binary_(BinaryOp op, const Tensor& self, const Tensor& other) {
  const char* name = binary_op_name(op);
  check_same_device_dtype(name, self, other);
  RG_CHECK(!is_comparison(op), name, "has no in-place form");
  profiler::OpScope record(name, 0, static_cast<double>(2 * self.nbytes() + other.nbytes()));
  backend_binary(self.device(), op, self.dtype(), make_args(name, self, {&self, &other}));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device_dtype("where", a, b);
  RG_CHECK(cond.defined() && cond.dtype() == DType::u8 && cond.device() == a.device(), "where",
           "condition must be a u8 tensor on ", a.device().str(), ", got ", cond.desc());
  const Shape shape = broadcast_shapes("where", cond.shape(), broadcast_shapes("where", a.shape(), b.shape()));
  Tensor out = empty(shape, a.dtype(), a.device());
  profiler::OpScope record("where", 0, static_cast<double>(cond.nbytes() + a.nbytes() + b.nbytes() + out.nbytes()));
  backend_where(a.device(), a.dtype(), make_args("where", out, {&cond, &a, &b}));
  return out;
}

void copy_(const Tensor& dst, const Tensor& src, bool non_blocking) {
  RG_CHECK(dst.defined() && src.defined(), "copy_", "undefined tensor argument");
  if (dst.numel() == 0) return;
  if (dst.device() == src.device()) {
    profiler::OpScope record("copy_", 0, static_cast<double>(src.nbytes() + dst.nbytes()));
    backend_cast_copy(dst.device(), dst.dtype(), src.dtype(), make_args("copy_", dst, {&src}));
    return;
  }
  RG_CHECK(backend_can_copy_between(src.device(), dst.device()), "copy_", "cannot copy between ", src.desc(), " and ",
           dst.desc(), " in a build without CUDA");
  // Across devices: a dense copy of src in dst's dtype and shape on src's device (src itself when it
  // already is one -- which keeps a pinned source pinned), move the bytes, then (if dst is strided)
  // scatter them into place on dst's device.
  profiler::OpScope record("copy_ across devices", 0, static_cast<double>(dst.nbytes()));  // the bytes moved
  const bool src_ready = src.is_contiguous() && src.dtype() == dst.dtype() && src.shape() == dst.shape();
  Tensor staged = src_ready ? src : empty(dst.shape(), dst.dtype(), src.device());
  if (!src_ready) copy_(staged, src);
  Tensor landed = dst.is_contiguous() ? dst : empty(dst.shape(), dst.dtype(), dst.device());
  backend_copy_bytes(landed.raw_data(), dst.device(), staged.raw_data(), src.device(), staged.nbytes(), non_blocking,
                     staged.storage()->pinned());
  if (!landed.is_same(dst)) copy_(dst, landed);
}

Tensor cast(const Tensor& a, DType dtype) {
  Tensor out = empty(a.shape(), dtype, a.device());
  copy_(out, a);
  return out;
}

Tensor to_device(const Tensor& a, Device device, bool non_blocking) {
  Tensor out = empty(a.shape(), a.dtype(), device);
  copy_(out, a, non_blocking);
  return out;
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  RG_CHECK(backend_has_pinned_memory(), "pin_memory",
           "page-locked memory needs the CUDA backend, which this build does not have (", shape_str(shape), " ",
           dtype_name(dtype), ")");
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* block = backend_pinned_allocate(nbytes);
  auto storage = std::make_shared<Storage>(
      block, nbytes, Device::cpu(), [nbytes](void* p) { backend_pinned_release(p, nbytes); }, /*pinned=*/true);
  return make_view(storage, shape, contiguous_strides(shape), 0, dtype);
}

Tensor pin_memory(const Tensor& a) {
  // Pinned memory is host memory: a GPU tensor has nothing to pin.
  RG_CHECK(a.defined() && a.device() == Device::cpu(), "pin_memory", "only CPU tensors can be pinned, got ",
           a.defined() ? a.desc() : std::string("undefined"));
  RG_CHECK(backend_has_pinned_memory(), "pin_memory",
           "page-locked memory needs the CUDA backend, which this build does not have (", a.desc(), ")");
  if (a.storage()->pinned() && a.is_contiguous()) return a;
  Tensor out = empty_pinned(a.shape(), a.dtype());
  copy_(out, a);
  return out;
}

Tensor contiguous(const Tensor& a) { return a.is_contiguous() ? a : cast(a, a.dtype()); }

}  // namespace native
}  // namespace ringgrad
