// Differentiable elementwise ops: forward and backward side by side. g is the gradient of the
// output; broadcast inputs get sum_to(grad, input shape), the backward of broadcasting.
#include "autograd/engine.h"
#include "core/native/native.h"
#include "core/ops.h"

namespace ringgrad {
namespace {

using autograd::NeedsGrad;
using autograd::record;
using autograd::TensorList;
using native::binary;
using native::unary;

Tensor zero_like_scalar(const Tensor& g) { return zeros({}, {.dtype = g.dtype(), .device = g.device()}); }

// Records a unary op whose gradient is dA = dfn(g, saved).
template <class Dfn>
Tensor unary_with_grad(const char* name, const Tensor& out, const Tensor& a, const Tensor& saved, Dfn dfn) {
  record(name, {out}, {a}, [saved = saved.detach(), dfn](const TensorList& g, const NeedsGrad&) -> TensorList {
    return {dfn(g[0], saved)};
  });
  return out;
}

}  // namespace

// out = a + b;  da = g, db = g
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::add, a, b);
  record("add", {out}, {a, b}, [sa = a.shape(), sb = b.shape()](const TensorList& g, const NeedsGrad& n) {
    return TensorList{n[0] ? sum_to(g[0], sa) : Tensor(), n[1] ? sum_to(g[0], sb) : Tensor()};
  });
  return out;
}

// out = a - b;  da = g, db = -g
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::sub, a, b);
  record("sub", {out}, {a, b}, [sa = a.shape(), sb = b.shape()](const TensorList& g, const NeedsGrad& n) {
    return TensorList{n[0] ? sum_to(g[0], sa) : Tensor(), n[1] ? sum_to(unary(UnaryOp::neg, g[0]), sb) : Tensor()};
  });
  return out;
}

// out = a * b;  da = g b, db = g a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::mul, a, b);
  record("mul", {out}, {a, b}, [a = a.detach(), b = b.detach()](const TensorList& g, const NeedsGrad& n) {
    return TensorList{n[0] ? sum_to(binary(BinaryOp::mul, g[0], b), a.shape()) : Tensor(),
                      n[1] ? sum_to(binary(BinaryOp::mul, g[0], a), b.shape()) : Tensor()};
  });
  return out;
}

// out = a / b;  da = g / b, db = -g a / b^2
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary(BinaryOp::div, a, b);
  record("div", {out}, {a, b}, [a = a.detach(), b = b.detach()](const TensorList& g, const NeedsGrad& n) {
    Tensor da, db;
    if (n[0]) da = sum_to(binary(BinaryOp::div, g[0], b), a.shape());
    if (n[1]) {
      Tensor q = binary(BinaryOp::div, binary(BinaryOp::mul, g[0], a), binary(BinaryOp::mul, b, b));
      db = sum_to(unary(UnaryOp::neg, q), b.shape());
    }
    return TensorList{da, db};
  });
  return out;
}

// out = a + s;  da = g
Tensor add(const Tensor& a, double s) {
  Tensor out = unary(UnaryOp::affine, a, {1.0, s});
  record("add_scalar", {out}, {a}, [](const TensorList& g, const NeedsGrad&) { return TensorList{g[0]}; });
  return out;
}

// out = a * s;  da = g s
Tensor mul(const Tensor& a, double s) {
  Tensor out = unary(UnaryOp::affine, a, {s, 0.0});
  record("mul_scalar", {out}, {a}, [s](const TensorList& g, const NeedsGrad&) {
    return TensorList{unary(UnaryOp::affine, g[0], {s, 0.0})};
  });
  return out;
}

// out = -a;  da = -g
Tensor neg(const Tensor& a) {
  Tensor out = unary(UnaryOp::neg, a);
  record("neg", {out}, {a},
         [](const TensorList& g, const NeedsGrad&) { return TensorList{unary(UnaryOp::neg, g[0])}; });
  return out;
}

// out = e^a;  da = g out
Tensor exp(const Tensor& a) {
  Tensor out = unary(UnaryOp::exp, a);
  return unary_with_grad("exp", out, a, out,
                         [](const Tensor& g, const Tensor& y) { return binary(BinaryOp::mul, g, y); });
}

// out = ln a;  da = g / a
Tensor log(const Tensor& a) {
  return unary_with_grad("log", unary(UnaryOp::log, a), a, a,
                         [](const Tensor& g, const Tensor& x) { return binary(BinaryOp::div, g, x); });
}

// out = sqrt(a);  da = g / (2 out)
Tensor sqrt(const Tensor& a) {
  Tensor out = unary(UnaryOp::sqrt, a);
  return unary_with_grad("sqrt", out, a, out, [](const Tensor& g, const Tensor& y) {
    return binary(BinaryOp::div, g, unary(UnaryOp::affine, y, {2.0, 0.0}));
  });
}

// out = a^(-1/2);  da = -g out^3 / 2
Tensor rsqrt(const Tensor& a) {
  Tensor out = unary(UnaryOp::rsqrt, a);
  return unary_with_grad("rsqrt", out, a, out, [](const Tensor& g, const Tensor& y) {
    Tensor y3 = binary(BinaryOp::mul, binary(BinaryOp::mul, y, y), y);
    return binary(BinaryOp::mul, g, unary(UnaryOp::affine, y3, {-0.5, 0.0}));
  });
}

// out = a^p;  da = g p a^(p-1)
Tensor pow(const Tensor& a, double p) {
  return unary_with_grad("pow", unary(UnaryOp::pow, a, {p, 0}), a, a, [p](const Tensor& g, const Tensor& x) {
    return binary(BinaryOp::mul, g, unary(UnaryOp::affine, unary(UnaryOp::pow, x, {p - 1.0, 0}), {p, 0.0}));
  });
}

// out = |a|;  da = g sign(a)  (0 at a = 0)
Tensor abs(const Tensor& a) {
  return unary_with_grad("abs", unary(UnaryOp::abs, a), a, a, [](const Tensor& g, const Tensor& x) {
    Tensor zero = zero_like_scalar(x);
    return native::where(binary(BinaryOp::gt, x, zero), g,
                         native::where(binary(BinaryOp::lt, x, zero), unary(UnaryOp::neg, g), zero));
  });
}

// out = tanh a;  da = g (1 - out^2)
Tensor tanh(const Tensor& a) {
  Tensor out = unary(UnaryOp::tanh, a);
  return unary_with_grad("tanh", out, a, out,
                         [](const Tensor& g, const Tensor& y) { return binary(BinaryOp::tanh_backward, g, y); });
}

// out = 1 / (1 + e^-a);  da = g out (1 - out)
Tensor sigmoid(const Tensor& a) {
  Tensor out = unary(UnaryOp::sigmoid, a);
  return unary_with_grad("sigmoid", out, a, out,
                         [](const Tensor& g, const Tensor& y) { return binary(BinaryOp::sigmoid_backward, g, y); });
}

// out = max(a, 0);  da = g [a > 0]
Tensor relu(const Tensor& a) {
  return unary_with_grad("relu", unary(UnaryOp::relu, a), a, a,
                         [](const Tensor& g, const Tensor& x) { return binary(BinaryOp::relu_backward, g, x); });
}

// out = gelu(a) (tanh approximation);  da = g gelu'(a), formula in core/elementwise.h
Tensor gelu(const Tensor& a) {
  return unary_with_grad("gelu", unary(UnaryOp::gelu, a), a, a,
                         [](const Tensor& g, const Tensor& x) { return binary(BinaryOp::gelu_backward, g, x); });
}

// out = min(max(a, lo), hi);  da = g [lo <= a <= hi]
Tensor clamp(const Tensor& a, double lo, double hi) {
  RG_CHECK(lo <= hi, "clamp", "lo ", lo, " > hi ", hi);
  return unary_with_grad("clamp", unary(UnaryOp::clamp, a, {lo, hi}), a, a, [lo, hi](const Tensor& g, const Tensor& x) {
    Tensor inside = binary(BinaryOp::eq, x, unary(UnaryOp::clamp, x, {lo, hi}));
    return native::where(inside, g, zero_like_scalar(g));
  });
}

namespace {
// maximum / minimum: the gradient goes to the selected input; ties go to a.
Tensor extremum(const char* name, BinaryOp op, BinaryOp a_wins, const Tensor& a, const Tensor& b) {
  Tensor out = binary(op, a, b);
  record(name, {out}, {a, b}, [a = a.detach(), b = b.detach(), a_wins](const TensorList& g, const NeedsGrad& n) {
    Tensor pick_a = binary(a_wins, a, b), zero = zero_like_scalar(g[0]);
    return TensorList{n[0] ? sum_to(native::where(pick_a, g[0], zero), a.shape()) : Tensor(),
                      n[1] ? sum_to(native::where(pick_a, zero, g[0]), b.shape()) : Tensor()};
  });
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("maximum", BinaryOp::maximum, BinaryOp::ge, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("minimum", BinaryOp::minimum, BinaryOp::le, a, b); }

// out = cond ? a : b;  da = g where cond, db = g elsewhere
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = native::where(cond, a, b);
  record("where", {out}, {a, b},
         [c = cond.detach(), sa = a.shape(), sb = b.shape()](const TensorList& g, const NeedsGrad& n) {
           Tensor zero = zero_like_scalar(g[0]);
           return TensorList{n[0] ? sum_to(native::where(c, g[0], zero), sa) : Tensor(),
                             n[1] ? sum_to(native::where(c, zero, g[0]), sb) : Tensor()};
         });
  return out;
}

// Comparisons: no gradient.
Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(BinaryOp::ge, a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }

}  // namespace ringgrad
