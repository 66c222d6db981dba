// Every differentiable op in core/ops.h against central finite differences in double precision
// (autograd/gradcheck.h: eps 1e-6, |analytic - numeric| <= atol 1e-5 + rtol 1e-3 * |numeric|).
//
// Inputs are f64 leaves that require grad, drawn from TestRng, on shapes that exercise broadcasting
// ((3, 1, 4) with (2, 4)) and strided views (the fn transposes or slices its input before the op, so
// the op sees a non-contiguous tensor; gradcheck itself converts inputs to packed f64 copies).
// Kinks are kept away from: relu/abs inputs have |x| >= 0.2, clamp inputs stay 0.1 from the bounds,
// max/maximum/minimum operands differ by >= 0.1, log/sqrt/rsqrt/pow inputs are in [0.5, 2].
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../core/test_util.h"

using namespace ringgrad;
using rgtest::make_i64;
using TL = std::vector<Tensor>;

namespace {

// An f64 leaf that requires grad, with values in [lo, hi).
Tensor param(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = rgtest::random_tensor(shape, seed, lo, hi, DType::f64);
  t.requires_grad_(true);
  return t;
}

// An f64 leaf with |values| in [0.2, 1.2] (away from a kink at 0).
Tensor param_away_from_zero(const Shape& shape, uint64_t seed) {
  Tensor t =
      rgtest::make(rgtest::values_away_from_zero(static_cast<size_t>(shape_numel(shape)), seed), shape, DType::f64);
  t.requires_grad_(true);
  return t;
}

Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  Tensor t = rgtest::make(values, shape, DType::f64);
  t.requires_grad_(true);
  return t;
}

// Distinct values 0.1 apart, shuffled: no ties for max, gaps far larger than eps.
Tensor param_distinct(const Shape& shape, uint64_t seed) {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.1 * static_cast<double>(i) - 0.05 * static_cast<double>(n);
  rgtest::TestRng rng(seed);
  for (size_t i = n - 1; i > 0; --i) std::swap(v[i], v[rng.next() % (i + 1)]);
  return leaf(v, shape);
}

}  // namespace

// GRADCHECK_OK(fn, inputs[, options]): gradcheck passes; on failure prints its message.
#define GRADCHECK_OK(...)                                                                       \
  do {                                                                                          \
    const ::ringgrad::GradcheckResult rg_r_ = ::ringgrad::gradcheck(__VA_ARGS__);               \
    CHECK_MESSAGE(rg_r_.ok, rg_r_.message << " (max_abs_error " << rg_r_.max_abs_error << ")"); \
  } while (0)

// ---- elementwise ------------------------------------------------------------------------------

TEST_CASE("gradcheck passes for every unary elementwise op on packed and transposed inputs") {
  const Tensor any = param({4, 3}, 1, -2, 2);
  const Tensor pos = param({4, 3}, 2, 0.5, 2);
  const Tensor away = param_away_from_zero({4, 3}, 3);
  for (bool transposed : {false, true}) {
    INFO(std::string(transposed ? "transposed input" : "packed input"));
    auto in = [transposed](const Tensor& x) { return transposed ? x.t() : x; };
    GRADCHECK_OK([&](const TL& x) { return neg(in(x[0])); }, {any});
    GRADCHECK_OK([&](const TL& x) { return -in(x[0]); }, {any});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::exp(in(x[0])); }, {any});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::log(in(x[0])); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::sqrt(in(x[0])); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return rsqrt(in(x[0])); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::pow(in(x[0]), 3.0); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::pow(in(x[0]), 0.5); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::pow(in(x[0]), -1.5); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::pow(in(x[0]), 2.0); }, {any});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::abs(in(x[0])); }, {away});
    GRADCHECK_OK([&](const TL& x) { return ringgrad::tanh(in(x[0])); }, {any});
    GRADCHECK_OK([&](const TL& x) { return sigmoid(in(x[0])); }, {any});
    GRADCHECK_OK([&](const TL& x) { return relu(in(x[0])); }, {away});
    GRADCHECK_OK([&](const TL& x) { return gelu(in(x[0])); }, {any});
    // The Tensor methods record the same graph.
    GRADCHECK_OK([&](const TL& x) { return in(x[0]).exp().tanh().pow(2.0); }, {any});
    GRADCHECK_OK([&](const TL& x) { return in(x[0]).sqrt().log().abs(); }, {pos});
    GRADCHECK_OK([&](const TL& x) { return in(x[0]).sigmoid() + in(x[0]).relu(); }, {away});
  }
}

TEST_CASE("gradcheck passes for clamp with inputs inside, below and above the bounds") {
  // Bounds -0.7 and 0.7; values at least 0.1 from either bound, on both sides.
  const Tensor x = leaf({-1.3, -0.9, -0.5, -0.1, 0.0, 0.3, 0.55, 0.85, 1.4, -0.6, 0.6, 2.0}, {3, 4});
  GRADCHECK_OK([](const TL& v) { return clamp(v[0], -0.7, 0.7); }, {x});
  GRADCHECK_OK([](const TL& v) { return clamp(v[0].t(), -0.7, 0.7); }, {x});
}

TEST_CASE("gradcheck passes for arithmetic with a scalar on either side") {
  const Tensor a = param({3, 4}, 4);
  GRADCHECK_OK([](const TL& x) { return add(x[0], 2.5); }, {a});
  GRADCHECK_OK([](const TL& x) { return mul(x[0], -1.5); }, {a});
  GRADCHECK_OK([](const TL& x) { return x[0] + 1.0; }, {a});
  GRADCHECK_OK([](const TL& x) { return x[0] - 1.0; }, {a});
  GRADCHECK_OK([](const TL& x) { return x[0] * 3.0; }, {a});
  GRADCHECK_OK([](const TL& x) { return x[0] / 3.0; }, {a});
  GRADCHECK_OK([](const TL& x) { return 2.0 + x[0]; }, {a});
  GRADCHECK_OK([](const TL& x) { return 2.0 - x[0]; }, {a});
  GRADCHECK_OK([](const TL& x) { return 0.5 * x[0]; }, {a});
}

TEST_CASE("gradcheck passes for binary ops on equal shapes, broadcast shapes and strided views") {
  const Tensor a = param({3, 4}, 5);
  const Tensor b = param_away_from_zero({3, 4}, 6);  // a divisor away from 0
  // maximum/minimum: c and d differ by at least 0.1 everywhere
  const Tensor c = leaf(rgtest::random_values(12, 7), {3, 4});
  std::vector<double> dv = rgtest::values_away_from_zero(12, 8, 0.1, 0.5);
  const std::vector<double> cv = c.to_vector();
  for (size_t i = 0; i < dv.size(); ++i) dv[i] += cv[i];
  const Tensor d = leaf(dv, {3, 4});

  GRADCHECK_OK([](const TL& x) { return add(x[0], x[1]); }, {a, b});
  GRADCHECK_OK([](const TL& x) { return sub(x[0], x[1]); }, {a, b});
  GRADCHECK_OK([](const TL& x) { return mul(x[0], x[1]); }, {a, b});
  GRADCHECK_OK([](const TL& x) { return div(x[0], x[1]); }, {a, b});
  GRADCHECK_OK([](const TL& x) { return maximum(x[0], x[1]); }, {c, d});
  GRADCHECK_OK([](const TL& x) { return minimum(x[0], x[1]); }, {c, d});
  GRADCHECK_OK([](const TL& x) { return x[0] * x[0]; }, {a});  // the same input twice
  GRADCHECK_OK([](const TL& x) { return x[0] / x[0].abs(); }, {b});

  // Broadcasting: (3, 1, 4) with (2, 4) -> (3, 2, 4); the gradients are summed back.
  const Tensor p = param({3, 1, 4}, 9);
  const Tensor q = param_away_from_zero({2, 4}, 10);
  GRADCHECK_OK([](const TL& x) { return x[0] + x[1]; }, {p, q});
  GRADCHECK_OK([](const TL& x) { return x[0] - x[1]; }, {p, q});
  GRADCHECK_OK([](const TL& x) { return x[0] * x[1]; }, {p, q});
  GRADCHECK_OK([](const TL& x) { return x[0] / x[1]; }, {p, q});
  GRADCHECK_OK([](const TL& x) { return x[1] / x[0].exp(); }, {p, q});
  // maximum/minimum broadcast: (3, 1) against (1, 4) with all pairs 0.1 apart
  const Tensor col = leaf({-1.0, 0.05, 1.0}, {3, 1});
  const Tensor row = leaf({-0.5, 0.3, 0.6, 1.5}, {1, 4});
  GRADCHECK_OK([](const TL& x) { return maximum(x[0], x[1]); }, {col, row});
  GRADCHECK_OK([](const TL& x) { return minimum(x[1], x[0]); }, {col, row});

  // Strided operands: a transposed (4, 3) and an every-other-column (3, 8) slice.
  const Tensor at = param({4, 3}, 11);
  const Tensor wide = param_away_from_zero({3, 8}, 12);
  GRADCHECK_OK([](const TL& x) { return x[0].t() * x[1].slice(1, 0, 8, 2); }, {at, wide});
  GRADCHECK_OK([](const TL& x) { return x[0].t() / x[1].slice(1, 1, 8, 2); }, {at, wide});
  GRADCHECK_OK([](const TL& x) { return x[1].slice(1, 0, 8, 2) - x[0].t(); }, {at, wide});
  // An expanded (stride-0) operand
  const Tensor e = param({3, 1}, 13);
  GRADCHECK_OK([](const TL& x) { return x[0].expand({3, 4}) * x[1]; }, {e, a});
}

TEST_CASE("gradcheck passes for where with a u8 condition, including broadcasting") {
  const Tensor cond = rgtest::make({1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1}, {3, 4}, DType::u8);
  const Tensor a = param({3, 4}, 14), b = param({3, 4}, 15);
  GRADCHECK_OK([](const TL& x) { return where(x[0], x[1], x[2]); }, {cond, a, b});
  const Tensor cond_col = rgtest::make({1, 0, 1}, {3, 1}, DType::u8);
  const Tensor row = param({4}, 16);
  GRADCHECK_OK([](const TL& x) { return where(x[0], x[1], x[2]); }, {cond_col, a, row});
  GRADCHECK_OK([](const TL& x) { return where(x[0], x[2], x[1].t()); }, {cond, param({4, 3}, 17), a});
}

// ---- views and casts --------------------------------------------------------------------------

TEST_CASE("gradcheck passes for every view") {
  const Tensor x = param({2, 3, 4}, 20);
  const Tensor m = param({3, 4}, 21);
  GRADCHECK_OK([](const TL& v) { return v[0].view({6, 4}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].view({-1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].reshape({4, 6}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].t().reshape({12}); }, {m});    // reshape must copy here
  GRADCHECK_OK([](const TL& v) { return v[0].t().view({2, 2, 3}); }, {m});  // splits the stride-1 dim
  GRADCHECK_OK([](const TL& v) { return v[0].transpose(0, 2); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].t(); }, {m});
  GRADCHECK_OK([](const TL& v) { return v[0].permute({2, 0, 1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].narrow(2, 1, 2); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].slice(2, 0, 4, 3); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].slice(1, 1, 3, 1); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].select(1, 2); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].select(-1, 0); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].expand({2, 3, 4}); }, {param({3, 1}, 22)});
  GRADCHECK_OK([](const TL& v) { return v[0].squeeze(); }, {param({1, 3, 1, 2}, 23)});
  GRADCHECK_OK([](const TL& v) { return v[0].squeeze(2); }, {param({1, 3, 1, 2}, 24)});
  GRADCHECK_OK([](const TL& v) { return v[0].unsqueeze(1); }, {m});
  GRADCHECK_OK([](const TL& v) { return v[0].flatten(); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].flatten(1); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].t().contiguous(); }, {m});
  GRADCHECK_OK([](const TL& v) { return v[0].contiguous(); }, {m});
  GRADCHECK_OK([](const TL& v) { return v[0].clone(); }, {m});
  // Chains of views, and a view used twice: gradients through both paths add.
  GRADCHECK_OK([](const TL& v) { return v[0].permute({1, 2, 0}).slice(1, 0, 4, 2).select(0, 1).unsqueeze(0); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].t() * v[0].t().exp(); }, {m});
  GRADCHECK_OK([](const TL& v) { return v[0].narrow(1, 0, 2) * v[0].narrow(1, 2, 2); }, {m});
}

TEST_CASE("gradcheck passes through dtype casts") {
  // A round trip through f32 quantises to f32 resolution (relative 6e-8): with eps 1e-2 the central
  // difference of a linear fn is exact up to 2 * 6e-8 * |x| / 2e-2 < 1e-5, and for exp the truncation
  // error is f''' eps^2 / 6 ~ 2e-5 relative: within atol 1e-4, rtol 1e-3.
  GradcheckOptions coarse;
  coarse.eps = 1e-2;
  coarse.atol = 1e-4;
  const Tensor x = param({3, 4}, 25, 0.5, 2);
  GRADCHECK_OK([](const TL& v) { return v[0].to(DType::f32).to(DType::f64); }, {x}, coarse);
  GRADCHECK_OK([](const TL& v) { return (v[0].to(DType::f32).exp() * 2.0).to(DType::f64); }, {x}, coarse);

  // f16 / bf16: inputs on the 16-bit grid and eps = 1/16, so x +- eps is exactly representable and the
  // central difference of a linear fn is exact. The analytic gradient flows through the 16-bit tensor
  // (as in PyTorch, the gradient of a cast has the dtype of the cast's output) and so is rounded to 16
  // bits once: rtol 2^-10 for f16 (11-bit significand), 2^-7 for bf16 (8-bit significand).
  GradcheckOptions grid;
  grid.eps = 1.0 / 16;
  std::vector<double> v;
  for (int i = 0; i < 12; ++i) v.push_back(0.5 + i / 8.0);  // multiples of 2^-3 in [0.5, 2)
  const Tensor g = leaf(v, {3, 4});
  grid.rtol = 0x1p-10;
  GRADCHECK_OK([](const TL& t) { return t[0].to(DType::f16).to(DType::f64) * 3.0; }, {g}, grid);
  grid.rtol = 0x1p-7;
  GRADCHECK_OK([](const TL& t) { return t[0].to(DType::bf16).to(DType::f64) * 3.0; }, {g}, grid);
}

// ---- reductions -------------------------------------------------------------------------------

TEST_CASE("gradcheck passes for sum, mean and var over dims with and without keepdim") {
  const Tensor x = param({2, 3, 4}, 30);
  GRADCHECK_OK([](const TL& v) { return v[0].sum(); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].sum({0, 2}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].sum({1}, true); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].sum({-1}) * v[0].sum({-1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].mean(); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].mean({-1}, true); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].mean({0, 1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].var(); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].var({}, false, false); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].var({1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].var({2}, true, false); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].var({0, 2}, true, true); }, {x});
  // on a strided view
  GRADCHECK_OK([](const TL& v) { return v[0].transpose(0, 2).sum({1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].slice(2, 0, 4, 2).var({2}); }, {x});
}

TEST_CASE("gradcheck passes for max over a dim, the gradient going to the argmax") {
  const Tensor x = param_distinct({3, 4, 5}, 31);
  GRADCHECK_OK([](const TL& v) { return ringgrad::max(v[0], 0); }, {x});
  GRADCHECK_OK([](const TL& v) { return ringgrad::max(v[0], 1, true); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].max(-1); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].transpose(0, 1).max(2); }, {x});
}

TEST_CASE("gradcheck passes for sum_to, the backward of broadcasting") {
  const Tensor x = param({2, 3, 4}, 32);
  GRADCHECK_OK([](const TL& v) { return sum_to(v[0], {3, 1}); }, {x});
  GRADCHECK_OK([](const TL& v) { return sum_to(v[0], {4}); }, {x});
  GRADCHECK_OK([](const TL& v) { return sum_to(v[0], {1, 3, 4}); }, {x});
  GRADCHECK_OK([](const TL& v) { return sum_to(v[0], {2, 3, 4}); }, {x});
}

// ---- linear algebra ---------------------------------------------------------------------------

TEST_CASE("gradcheck passes for matmul of two vectors") {
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({5}, 40), param({5}, 41)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[0]); }, {param({5}, 39)});
}

TEST_CASE("gradcheck passes for matmul of a matrix and a vector (torch.matmul forms)") {
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({3, 4}, 50), param({4}, 51)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({4}, 48), param({4, 3}, 49)});
}

TEST_CASE("gradcheck passes for batched matmul, mm, bmm and linear") {
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({3, 4}, 42), param({4, 2}, 43)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({2, 1, 3, 4}, 44), param({5, 4, 2}, 45)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({2, 3, 4}, 46), param({4, 5}, 47)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[1]); }, {param({3, 4}, 73), param({2, 4, 5}, 74)});
  // transposed and sliced operands
  GRADCHECK_OK([](const TL& v) { return matmul(v[0].t(), v[1].t()); }, {param({4, 3}, 52), param({2, 4}, 53)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0].slice(1, 0, 8, 2), v[1]); },
               {param({3, 8}, 54), param({4, 2}, 55)});
  GRADCHECK_OK([](const TL& v) { return matmul(v[0], v[0].transpose(-1, -2)); }, {param({2, 3, 4}, 56)});

  GRADCHECK_OK([](const TL& v) { return mm(v[0], v[1]); }, {param({3, 4}, 57), param({4, 5}, 58)});
  GRADCHECK_OK([](const TL& v) { return mm(v[0].t(), v[1]); }, {param({4, 3}, 59), param({4, 5}, 60)});
  GRADCHECK_OK([](const TL& v) { return bmm(v[0], v[1]); }, {param({2, 3, 4}, 61), param({2, 4, 5}, 62)});
  GRADCHECK_OK([](const TL& v) { return bmm(v[0].transpose(1, 2), v[1]); },
               {param({2, 4, 3}, 63), param({2, 4, 5}, 64)});

  GRADCHECK_OK([](const TL& v) { return linear(v[0], v[1], v[2]); },
               {param({2, 3, 4}, 65), param({5, 4}, 66), param({5}, 67)});
  GRADCHECK_OK([](const TL& v) { return linear(v[0], v[1]); }, {param({6, 4}, 68), param({5, 4}, 69)});
  GRADCHECK_OK([](const TL& v) { return linear(v[0].t(), v[1], v[2]); },
               {param({4, 6}, 70), param({5, 4}, 71), param({5}, 72)});
  GRADCHECK_OK([](const TL& v) { return linear(v[0], v[1], v[2]); },
               {param({4}, 75), param({5, 4}, 76), param({5}, 77)});
  GRADCHECK_OK([](const TL& v) { return linear(v[0].transpose(0, 1), v[1], v[2]); },
               {param({3, 2, 4}, 78), param({5, 4}, 79), param({5}, 80)});
}

// ---- softmax and losses -----------------------------------------------------------------------

TEST_CASE("gradcheck passes for softmax and log_softmax over dim 0 and dim -1") {
  const Tensor x = param({3, 4}, 80, -3, 3);
  GRADCHECK_OK([](const TL& v) { return softmax(v[0], 0); }, {x});
  GRADCHECK_OK([](const TL& v) { return softmax(v[0], -1); }, {x});
  GRADCHECK_OK([](const TL& v) { return log_softmax(v[0], 0); }, {x});
  GRADCHECK_OK([](const TL& v) { return log_softmax(v[0], -1); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].t().softmax(1); }, {x});
  GRADCHECK_OK([](const TL& v) { return v[0].log_softmax(1); }, {param({2, 3, 4}, 81, -3, 3)});
  // large logits: the stable form has a well-defined gradient
  GRADCHECK_OK([](const TL& v) { return log_softmax(v[0] * 100.0, 1); }, {x});
}

TEST_CASE("gradcheck passes for cross_entropy, including ignored targets") {
  const Tensor logits = param({4, 5}, 90, -2, 2);
  GRADCHECK_OK([](const TL& v) { return cross_entropy(v[0], v[1]); }, {logits, make_i64({1, 4, 0, 3}, {4})});
  GRADCHECK_OK([](const TL& v) { return cross_entropy(v[0], v[1]); }, {logits, make_i64({1, -100, 3, 0}, {4})});
  GRADCHECK_OK([](const TL& v) { return cross_entropy(v[0], v[1], 2); }, {logits, make_i64({2, 2, 4, 0}, {4})});
  GRADCHECK_OK([](const TL& v) { return cross_entropy(v[0].t(), v[1]); },
               {param({5, 4}, 91), make_i64({0, 1, 2, 3}, {4})});
}

// ---- joining, splitting, indexing -------------------------------------------------------------

TEST_CASE("gradcheck passes for cat, stack and split") {
  const Tensor a = param({2, 3}, 100), b = param({1, 3}, 101), c = param({2, 2}, 102);
  GRADCHECK_OK([](const TL& v) { return cat({v[0], v[1], v[0]}, 0); }, {a, b});
  GRADCHECK_OK([](const TL& v) { return cat({v[0], v[1]}, 1); }, {a, c});
  GRADCHECK_OK([](const TL& v) { return cat({v[1].t(), v[0].t()}, -2); }, {a, c});
  const Tensor d = param({2, 3}, 103);
  GRADCHECK_OK([](const TL& v) { return stack({v[0], v[1]}, 0); }, {a, d});
  GRADCHECK_OK([](const TL& v) { return stack({v[0], v[1], v[0]}, 1); }, {a, d});
  GRADCHECK_OK([](const TL& v) { return stack({v[0], v[1].t().t()}, -1); }, {a, d});

  // split (5, 3) by 2 along dim 0: (2, 3), (2, 3), (1, 3); use every piece
  GRADCHECK_OK(
      [](const TL& v) {
        const auto p = split(v[0], 2, 0);
        return p[0] * p[1] + p[2].exp();
      },
      {param({5, 3}, 104)});
  GRADCHECK_OK(
      [](const TL& v) {
        const auto p = split(v[0], 3, 1);
        return cat({p[1], p[0]}, 1);
      },
      {param({2, 6}, 105)});
}

TEST_CASE("gradcheck passes for index_select and gather, repeated indices accumulating") {
  const Tensor x = param({3, 4}, 110);
  GRADCHECK_OK([](const TL& v) { return index_select(v[0], 0, v[1]); }, {x, make_i64({2, 0, 2, 1}, {4})});
  GRADCHECK_OK([](const TL& v) { return index_select(v[0], 1, v[1]); }, {x, make_i64({3, 3, 0}, {3})});
  GRADCHECK_OK([](const TL& v) { return index_select(v[0].t(), 0, v[1]); }, {x, make_i64({1, 1}, {2})});
  GRADCHECK_OK([](const TL& v) { return gather(v[0], 1, v[1]); }, {x, make_i64({3, 3, 0, 1, 2, 0}, {3, 2})});
  GRADCHECK_OK([](const TL& v) { return gather(v[0], 0, v[1]); }, {x, make_i64({2, 0, 1, 2, 0, 0, 0, 1}, {2, 4})});
}

// ---- composites and the checker itself ----------------------------------------------------------

TEST_CASE("gradcheck passes for a small network and a layer norm built from primitives") {
  const Tensor x = param({4, 6}, 120);
  const Tensor w1 = param({5, 6}, 121), b1 = param({5}, 122), w2 = param({3, 5}, 123), b2 = param({3}, 124);
  GRADCHECK_OK(
      [](const TL& v) {
        const Tensor h = gelu(linear(v[0], v[1], v[2]));
        return cross_entropy(linear(h, v[3], v[4]), v[5]);
      },
      {x, w1, b1, w2, b2, make_i64({0, 2, 1, 2}, {4})});
  GRADCHECK_OK(
      [](const TL& v) {
        const Tensor mu = v[0].mean({-1}, true);
        const Tensor var = v[0].var({-1}, true, false);
        return (v[0] - mu) * rsqrt(var + 1e-5) * v[1] + v[2];
      },
      {x, param({6}, 125), param({6}, 126)});
}

TEST_CASE("gradcheck converts f32 inputs and leaves inputs without requires_grad unchecked") {
  Tensor f = rgtest::random_tensor({3, 4}, 130);  // f32
  f.requires_grad_(true);
  const Tensor constant = rgtest::random_tensor({3, 4}, 131, 0.5, 1.5, DType::f64);  // no requires_grad
  GRADCHECK_OK(
      [](const TL& v) {
        CHECK(v[0].dtype() == DType::f64);
        CHECK(v[1].dtype() == DType::f64);
        return v[0].exp() * v[1];
      },
      {f, constant});
}

namespace {

// square(x) = x^2 built with autograd::record and a backward lambda, right or deliberately wrong.
Tensor custom_square(const Tensor& x, bool correct) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * x;
  }
  const Tensor saved = x.detach();
  autograd::record("custom_square", {y}, {x},
                   [saved, correct](const autograd::TensorList& grads,
                                    const autograd::NeedsGrad&) -> autograd::TensorList {
                     // d(x^2)/dx = 2x; the wrong version forgets the factor 2
                     return {correct ? grads[0] * saved * 2.0 : grads[0] * saved};
                   });
  return y;
}

}  // namespace

TEST_CASE("gradcheck fails on a deliberately wrong gradient") {
  const Tensor x = param({3, 4}, 140, 0.5, 1.5);
  GRADCHECK_OK([](const TL& v) { return custom_square(v[0], /*correct=*/true); }, {x});

  const GradcheckResult r = gradcheck([](const TL& v) { return custom_square(v[0], /*correct=*/false); }, {x});
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.message.empty());
  // analytic x*v against numeric 2x*v: the error is about |x*v|, far above the tolerance
  CHECK(r.max_abs_error > 1e-3);
}

namespace {

// a * b with a backward that is right for a and wrong (twice too large) for b.
Tensor custom_mul_wrong_for_b(const Tensor& a, const Tensor& b) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = a * b;
  }
  autograd::record("custom_mul", {y}, {a, b},
                   [sa = a.detach(), sb = b.detach()](const autograd::TensorList& grads,
                                                      const autograd::NeedsGrad&) -> autograd::TensorList {
                     return {grads[0] * sb, grads[0] * sa * 2.0};
                   });
  return y;
}

}  // namespace

TEST_CASE("gradcheck checks every input, not only the first") {
  const Tensor a = param({2, 3}, 150), b = param({2, 3}, 151);
  const GradcheckResult r = gradcheck([](const TL& v) { return custom_mul_wrong_for_b(v[0], v[1]); }, {a, b});
  CHECK_FALSE(r.ok);
  INFO("message: " << r.message);
  CHECK(rgtest::contains(r.message, "input 1"));  // the header promises the input index in the message
}

TEST_CASE("gradcheck accepts an input the function does not use") {
  const Tensor a = param({2, 3}, 152), unused = param({4}, 153);
  GRADCHECK_OK([](const TL& v) { return v[0].exp(); }, {a, unused});
}
