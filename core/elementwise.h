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

// ---- exp that vectorises ---------------------------------------------------------------------------
// libm's expf / tanhf are a function call per element, which keeps a loop scalar: GPT-mini's GELU
// spent ~30% of a training step inside __tanhf / __expm1f. exp_of(float) is branch-free arithmetic
// the compiler turns into AVX2 code: x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2 (ln2 split
// in two so n ln2 is exact), exp(r) by its Taylor series to r^7 (truncation < 6e-9 relative), then
// 2^n put straight into the exponent bits. Accurate to ~2 ulp; exact 0 / inf outside the float range
// and NaN for NaN (as expf). Device code uses the CUDA library's expf; double stays std::exp.
RG_HOST_DEVICE RG_INLINE float exp_of(float x) {
#ifdef __CUDA_ARCH__
  return ::expf(x);
#else
  constexpr float kLo = -87.3f, kHi = 88.3f;  // 2^n stays a normal float in between
  // A NaN goes through the arithmetic as kLo (a NaN reaching the float-to-int conversion below would
  // be undefined behaviour) and comes out as itself at the end.
  const float xc = x >= kLo ? (x <= kHi ? x : kHi) : kLo;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  const float r = (xc - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  const float y = p * scale;
  return x != x ? x : (x < kLo ? 0.0f : (x > kHi ? __builtin_inff() : y));
#endif
}
RG_HOST_DEVICE RG_INLINE double exp_of(double x) { return std::exp(x); }
template <class T>  // integer compute types: only instantiated, never run (the front end refuses exp on them)
RG_HOST_DEVICE RG_INLINE double exp_of(T x) {
  return std::exp(static_cast<double>(x));
}

// ---- unary ops ------------------------------------------------------------------------------------
enum class UnaryOp : uint8_t {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  tanh,
  sigmoid,
  relu,
  gelu,
  pow,     // x ^ s.a
  clamp,   // min(max(x, s.a), s.b)
  affine,  // x * s.a + s.b   (scalar add and scalar multiply)
  fill,    // s.a (ignores x)
};
struct ScalarArgs {
  double a = 0, b = 0;
};

struct NegOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return -x;
  }
};
struct ExpOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return exp_of(x);
  }
};
struct LogOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return std::log(x);
  }
};
struct SqrtOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct RsqrtOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};
struct AbsOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? -x : x;
  }
};
struct TanhOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return std::tanh(x);
  }
};
struct SigmoidOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return T(1) / (T(1) + exp_of(-x));
  }
};
struct ReluOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? x : T(0);
  }
};

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// Computed as x sigmoid(2u) -- the same function, since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) --
// because exp_of vectorises and tanh does not; and sigmoid has no cancellation near tanh = -1.
struct GeluOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    const T k2 = T(2 * 0.7978845608028654);  // 2 sqrt(2/pi)
    return x / (T(1) + exp_of(-k2 * (x + T(0.044715) * x * x * x)));
  }
};
struct PowOp {
  double p;
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return std::pow(x, T(p));
  }
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
  template <class T>
  RG_HOST_DEVICE T operator()(T x) const {
    return x * T(scale) + T(shift);
  }
};
struct FillOp {
  double value;
  template <class T>
  RG_HOST_DEVICE T operator()(T) const {
    return T(value);
  }
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
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  // backward helpers: (grad, saved) -> grad_input
  relu_backward,     // g * (x > 0)
  gelu_backward,     // g * gelu'(x)
  tanh_backward,     // g * (1 - y^2), y = tanh(x)
  sigmoid_backward,  // g * y (1 - y), y = sigmoid(x)
  // comparisons write u8
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
};

struct AddOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T a, T b) const {
    return a / b;
  }
};
struct MaximumOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct MinimumOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct ReluBackwardOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T g, T x) const {
    return x > T(0) ? g : T(0);
  }
};
// gelu(x) = x s with s = sigmoid(2u), u = k (x + 0.044715 x^3), k = sqrt(2/pi) (see GeluOp), so
// d/dx gelu(x) = s + x * 2 s (1 - s) * du/dx,  du/dx = k (1 + 3 * 0.044715 x^2).
// (Equal to the tanh form 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx, t = tanh(u) = 2 s - 1.)
struct GeluBackwardOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T g, T x) const {
    const T k = T(0.7978845608028654);
    const T s = T(1) / (T(1) + exp_of(T(-2) * k * (x + T(0.044715) * x * x * x)));
    const T du = k * (T(1) + T(3 * 0.044715) * x * x);
    return g * (s + T(2) * x * s * (T(1) - s) * du);
  }
};
struct TanhBackwardOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T g, T y) const {
    return g * (T(1) - y * y);
  }
};
struct SigmoidBackwardOp {
  template <class T>
  RG_HOST_DEVICE T operator()(T g, T y) const {
    return g * y * (T(1) - y);
  }
};
struct EqOp {
  template <class T>
  RG_HOST_DEVICE uint8_t operator()(T a, T b) const {
    return a == b;
  }
};
struct NeOp {
  template <class T>
  RG_HOST_DEVICE uint8_t operator()(T a, T b) const {
    return a != b;
  }
};
struct LtOp {
  template <class T>
  RG_HOST_DEVICE uint8_t operator()(T a, T b) const {
    return a < b;
  }
};
struct LeOp {
  template <class T>
  RG_HOST_DEVICE uint8_t operator()(T a, T b) const {
    return a <= b;
  }
};
struct GtOp {
  template <class T>
  RG_HOST_DEVICE uint8_t operator()(T a, T b) const {
    return a > b;
  }
};
struct GeOp {
  template <class T>
  RG_HOST_DEVICE uint8_t operator()(T a, T b) const {
    return a >= b;
  }
};

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
  template <class T>
  RG_HOST_DEVICE T operator()(uint8_t c, T a, T b) const {
    return c ? a : b;
  }
};

}  // namespace ringgrad
