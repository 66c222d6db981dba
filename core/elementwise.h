// Elementwise math, written once for every backend (../shared/STYLE.md, "One kernel body, two
// launchers").
//
// Each op is a functor with an RG_HOST_DEVICE call operator templated on the compute type (float for
// f32/f16/bf16, double for f64, the integer type for integer tensors). core/cpu/elementwise.cpp loops
// over these functors; core/cuda/elementwise.cu runs the same functors in a grid-stride kernel. The
// enum -> functor mapping (visit_*_op) is shared too, so the two launchers cannot disagree.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/host_device.h"

namespace ringgrad {

// ---- strided operands -----------------------------------------------------------------------------
// Up to kMaxDims dims and kMaxOperands operands (operand 0 is the output). Inputs are already
// broadcast to the output shape (stride 0 on broadcast dims). Strides are in elements.
constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 4;

struct ElementwiseArgs {
  int ndim = 0;
  int noperands = 0;
  int64_t numel = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
  void* data[kMaxOperands] = {};
  bool contiguous = false;  // every operand is dense row-major over `shape`: a flat loop suffices
};

// Element offset of linear index `i` for operand `k` (row-major over args.shape).
RG_HOST_DEVICE RG_INLINE int64_t operand_offset(const ElementwiseArgs& args, int k, int64_t i) {
  int64_t off = 0;
  for (int d = args.ndim - 1; d >= 0; --d) {
    const int64_t idx = i % args.shape[d];
    i /= args.shape[d];
    off += idx * args.strides[k][d];
  }
  return off;
}

// ---- unary ops ------------------------------------------------------------------------------------
enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, rsqrt, abs, tanh, sigmoid, relu, gelu,
  pow,     // x ^ s.a
  clamp,   // min(max(x, s.a), s.b)
  affine,  // x * s.a + s.b   (scalar add and scalar multiply)
  fill,    // s.a (ignores x)
};
struct ScalarArgs {
  double a = 0, b = 0;
};

struct NegOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return -x; } };
struct ExpOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return std::exp(x); } };
struct LogOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return std::log(x); } };
struct SqrtOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return std::sqrt(x); } };
struct RsqrtOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return T(1) / std::sqrt(x); } };
struct AbsOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return x < T(0) ? -x : x; } };
struct TanhOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return std::tanh(x); } };
struct SigmoidOp {
  template <class T> RG_HOST_DEVICE T operator()(T x) const { return T(1) / (T(1) + std::exp(-x)); }
};
struct ReluOp { template <class T> RG_HOST_DEVICE T operator()(T x) const { return x > T(0) ? x : T(0); } };

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    const T k = T(0.7978845608028654);  // sqrt(2/pi)
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  }
};
struct PowOp {
  double p;
  template <class T> RG_HOST_DEVICE T operator()(T x) const { return std::pow(x, T(p)); }
};
struct ClampOp {
  double lo, hi;
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
  }
};
struct AffineOp {
  double scale, shift;
  template <class T> RG_HOST_DEVICE T operator()(T x) const { return x * T(scale) + T(shift); }
};
struct FillOp {
  double value;
  template <class T> RG_HOST_DEVICE T operator()(T) const { return T(value); }
};

template <class Fn>
RG_HOST_DEVICE decltype(auto) visit_unary_op(UnaryOp op, ScalarArgs s, Fn&& fn) {
  switch (op) {
    case UnaryOp::neg: return fn(NegOp{});
    case UnaryOp::exp: return fn(ExpOp{});
    case UnaryOp::log: return fn(LogOp{});
    case UnaryOp::sqrt: return fn(SqrtOp{});
    case UnaryOp::rsqrt: return fn(RsqrtOp{});
    case UnaryOp::abs: return fn(AbsOp{});
    case UnaryOp::tanh: return fn(TanhOp{});
    case UnaryOp::sigmoid: return fn(SigmoidOp{});
    case UnaryOp::relu: return fn(ReluOp{});
    case UnaryOp::gelu: return fn(GeluOp{});
    case UnaryOp::pow: return fn(PowOp{s.a});
    case UnaryOp::clamp: return fn(ClampOp{s.a, s.b});
    case UnaryOp::affine: return fn(AffineOp{s.a, s.b});
    case UnaryOp::fill: return fn(FillOp{s.a});
  }
  return fn(NegOp{});
}

// True for ops whose math only makes sense on floating types.
inline bool unary_op_needs_floating(UnaryOp op) {
  return !(op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu || op == UnaryOp::clamp ||
           op == UnaryOp::affine || op == UnaryOp::fill);
}
const char* unary_op_name(UnaryOp op);

// ---- binary ops -----------------------------------------------------------------------------------
enum class BinaryOp : uint8_t {
  add, sub, mul, div, maximum, minimum,
  // backward helpers: (grad, saved) -> grad_input
  relu_backward,     // g * (x > 0)
  gelu_backward,     // g * gelu'(x)
  tanh_backward,     // g * (1 - y^2), y = tanh(x)
  sigmoid_backward,  // g * y (1 - y), y = sigmoid(x)
  // comparisons write u8
  eq, ne, lt, le, gt, ge,
};

struct AddOp { template <class T> RG_HOST_DEVICE T operator()(T a, T b) const { return a + b; } };
struct SubOp { template <class T> RG_HOST_DEVICE T operator()(T a, T b) const { return a - b; } };
struct MulOp { template <class T> RG_HOST_DEVICE T operator()(T a, T b) const { return a * b; } };
struct DivOp { template <class T> RG_HOST_DEVICE T operator()(T a, T b) const { return a / b; } };
struct MaximumOp { template <class T> RG_HOST_DEVICE T operator()(T a, T b) const { return a < b ? b : a; } };
struct MinimumOp { template <class T> RG_HOST_DEVICE T operator()(T a, T b) const { return b < a ? b : a; } };
struct ReluBackwardOp {
  template <class T> RG_HOST_DEVICE T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};
// d/dx gelu(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), t = tanh(k (x + 0.044715 x^3))
struct GeluBackwardOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T g, T x) const {
    const T k = T(0.7978845608028654);
    const T t = std::tanh(k * (x + T(0.044715) * x * x * x));
    const T dinner = k * (T(1) + T(3 * 0.044715) * x * x);
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
  }
};
struct TanhBackwardOp {
  template <class T> RG_HOST_DEVICE T operator()(T g, T y) const { return g * (T(1) - y * y); }
};
struct SigmoidBackwardOp {
  template <class T> RG_HOST_DEVICE T operator()(T g, T y) const { return g * y * (T(1) - y); }
};
struct EqOp { template <class T> RG_HOST_DEVICE uint8_t operator()(T a, T b) const { return a == b; } };
struct NeOp { template <class T> RG_HOST_DEVICE uint8_t operator()(T a, T b) const { return a != b; } };
struct LtOp { template <class T> RG_HOST_DEVICE uint8_t operator()(T a, T b) const { return a < b; } };
struct LeOp { template <class T> RG_HOST_DEVICE uint8_t operator()(T a, T b) const { return a <= b; } };
struct GtOp { template <class T> RG_HOST_DEVICE uint8_t operator()(T a, T b) const { return a > b; } };
struct GeOp { template <class T> RG_HOST_DEVICE uint8_t operator()(T a, T b) const { return a >= b; } };

inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }
inline bool binary_op_needs_floating(BinaryOp op) {
  return op >= BinaryOp::relu_backward && op <= BinaryOp::sigmoid_backward;
}
const char* binary_op_name(BinaryOp op);

// Visits arithmetic ops (result has the input's type).
template <class Fn>
RG_HOST_DEVICE decltype(auto) visit_arith_op(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::add: return fn(AddOp{});
    case BinaryOp::sub: return fn(SubOp{});
    case BinaryOp::mul: return fn(MulOp{});
    case BinaryOp::div: return fn(DivOp{});
    case BinaryOp::maximum: return fn(MaximumOp{});
    case BinaryOp::minimum: return fn(MinimumOp{});
    case BinaryOp::relu_backward: return fn(ReluBackwardOp{});
    case BinaryOp::gelu_backward: return fn(GeluBackwardOp{});
    case BinaryOp::tanh_backward: return fn(TanhBackwardOp{});
    case BinaryOp::sigmoid_backward: return fn(SigmoidBackwardOp{});
    default: return fn(AddOp{});
  }
}
// Visits comparison ops (result is u8).
template <class Fn>
RG_HOST_DEVICE decltype(auto) visit_compare_op(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::eq: return fn(EqOp{});
    case BinaryOp::ne: return fn(NeOp{});
    case BinaryOp::lt: return fn(LtOp{});
    case BinaryOp::le: return fn(LeOp{});
    case BinaryOp::gt: return fn(GtOp{});
    default: return fn(GeOp{});
  }
}

// where(cond, a, b)
struct WhereOp {
  template <class T> RG_HOST_DEVICE T operator()(uint8_t c, T a, T b) const { return c ? a : b; }
};

}  // namespace ringgrad
