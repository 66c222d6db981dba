// Tensor metadata, element access and printing. The differentiable methods (views, math) are defined
// in autograd/functions/tensor_methods.cpp next to the ops they forward to.
#include "core/tensor.h"

#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/elementwise.h"
#include "core/ops.h"

namespace ringgrad {

int64_t shape_numel(const Shape& shape) {
  // Checked: a shape read from a file (an IDX header, a checkpoint) must not wrap around to a
  // small count and get a buffer too small for what is then read into it.
  // Zeros count as one in the extent: (0, 2^62, 2^62) holds no element, but its strides (which
  // contiguous_strides computes the same way) would overflow.
  int64_t n = 1, extent = 1;
  for (int64_t s : shape) {
    RG_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(s, 1), &extent) && !__builtin_mul_overflow(n, s, &n),
             "shape", "the product of the dimensions of ", shape_str(shape), " overflows 64 bits");
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    RG_CHECK(!__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s), "shape", "the strides of ",
             shape_str(shape), " overflow 64 bits");
  }
  return strides;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  RG_CHECK(dim >= lo && dim <= hi, op, "dimension ", dim, " out of range for a tensor with ", ndim, " dims (expected ",
           lo, " to ", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

Tensor make_view(const std::shared_ptr<Storage>& storage, Shape shape, Shape strides, int64_t offset, DType dtype) {
  RG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "tensor", "at most ", kMaxDims,
           " dims are supported, got shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

std::string Tensor::desc() const {
  if (!defined()) return "undefined";
  return shape_str(shape()) + " " + dtype_name(dtype()) + " " + device().str();
}

void* Tensor::raw_data() const {
  return static_cast<char*>(storage()->data()) + offset() * static_cast<int64_t>(element_size());
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = static_cast<const double*>(host.raw_data());
  return std::vector<double>(p, p + host.numel());
}

double Tensor::item() const {
  RG_CHECK(numel() == 1, "item", "needs a tensor with one element, got ", desc());
  return to_vector()[0];
}

// ---- printing -----------------------------------------------------------------------------------
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements; larger tensors print 3 items per edge
constexpr int64_t kEdgeItems = 3;

void print_values(std::ostream& os, const std::vector<double>& values, const Shape& shape, const Shape& strides,
                  int64_t dim, int64_t offset, bool summarize, bool integral, int indent) {
  if (shape.empty()) {
    os << values[0];
    return;
  }
  os << "[";
  const int64_t n = shape[dim];
  const bool last = dim + 1 == static_cast<int64_t>(shape.size());
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (last ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems - 1;
      continue;
    }
    const int64_t off = offset + i * strides[dim];
    if (last) {
      double v = values[off];
      if (integral) os << static_cast<long long>(v);
      else os << v;
    } else {
      print_values(os, values, shape, strides, dim + 1, off, summarize, integral, indent + 1);
    }
    if (i + 1 < n) os << (last ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  const std::vector<double> values = to_vector();
  const bool integral = !is_floating(dtype());
  os << std::setprecision(4);
  if (dim() == 0) {
    os << values[0];
  } else {
    print_values(os, values, shape(), contiguous_strides(shape()), 0, 0, numel() > kSummarizeAbove, integral, 7);
  }
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ringgrad
