// Values of every op in core/ops.h against references computed here in double precision, plus the
// factories, in-place ops, printing and the comparison helpers.
//
// Tolerances (f32 unless said otherwise):
//   * + - * / neg abs relu clamp maximum minimum where and comparisons are correctly rounded in f32,
//     so the expected value is the double result rounded to f32 and the check is exact.
//   * exp log tanh sigmoid pow rsqrt: rtol 2e-6 (about 16 f32 ulps), atol 1e-7 -- room for a
//     vectorised libm, not for a wrong formula. gelu: atol 1e-6 (1 + tanh(z) cancels near x = -3).
//   * reductions accumulate in f64 and round once (core/ops.h): rtol 2.4e-7 (2 ulps), atol 1e-9.
//   * GEMM accumulates in f32: for K <= 8 and |entries| <= 1, |error| <= K·ε·Σ|a·b| ≈ 8e-6: atol 1e-5.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ringgrad;
using rgtest::make;
using rgtest::make_i64;
using rgtest::round_to_f32;

namespace {

constexpr double kExact = 0.0;
constexpr double kTransRtol = 2e-6;
constexpr double kTransAtol = 1e-7;
constexpr double kReduceRtol = 2.4e-7;
constexpr double kReduceAtol = 1e-9;
constexpr double kGemmAtol = 1e-5;

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

std::vector<double> map(const std::vector<double>& xs, const std::function<double(double)>& f) {
  std::vector<double> out;
  for (double x : xs) out.push_back(f(x));
  return out;
}
std::vector<double> map2(const std::vector<double>& a, const std::vector<double>& b,
                         const std::function<double(double, double)>& f) {
  std::vector<double> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(f(a[i], b[i]));
  return out;
}

// GPT-2's GELU, tanh approximation, in double.
double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// out[b][i][j] = sum_k a[b][i][k] * w[b][k][j] for row-major blocks.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                               int64_t k, int64_t n, bool b_shared = false) {
  std::vector<double> out(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += a[s * m * k + i * k + q] * b[(b_shared ? 0 : s * k * n) + q * n + j];
        out[s * m * n + i * n + j] = acc;
      }
  return out;
}

}  // namespace

// ---- elementwise ------------------------------------------------------------------------------

TEST_CASE("binary arithmetic matches f32-rounded double arithmetic exactly") {
  const auto a = round_to_f32(rgtest::random_values(64, 11, -3, 3));
  auto b = round_to_f32(rgtest::random_values(64, 12, 0.25, 3));
  for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];  // keep |b| >= 0.25 for div
  const Tensor ta = make(a, {8, 8}), tb = make(b, {8, 8});
  const Shape s{8, 8};
  CHECK_VALUES(add(ta, tb), s, map2(a, b, [](double x, double y) { return f32(x + y); }), kExact, 0);
  CHECK_VALUES(sub(ta, tb), s, map2(a, b, [](double x, double y) { return f32(x - y); }), kExact, 0);
  CHECK_VALUES(mul(ta, tb), s, map2(a, b, [](double x, double y) { return f32(x * y); }), kExact, 0);
  CHECK_VALUES(div(ta, tb), s, map2(a, b, [](double x, double y) { return f32(x / y); }), kExact, 0);
  CHECK_VALUES(ta + tb, s, map2(a, b, [](double x, double y) { return f32(x + y); }), kExact, 0);
  CHECK_VALUES(ta - tb, s, map2(a, b, [](double x, double y) { return f32(x - y); }), kExact, 0);
  CHECK_VALUES(ta * tb, s, map2(a, b, [](double x, double y) { return f32(x * y); }), kExact, 0);
  CHECK_VALUES(ta / tb, s, map2(a, b, [](double x, double y) { return f32(x / y); }), kExact, 0);
  CHECK_VALUES(maximum(ta, tb), s, map2(a, b, [](double x, double y) { return std::max(x, y); }), kExact, 0);
  CHECK_VALUES(minimum(ta, tb), s, map2(a, b, [](double x, double y) { return std::min(x, y); }), kExact, 0);
}

TEST_CASE("arithmetic with a double scalar on either side") {
  const auto a = round_to_f32(rgtest::random_values(12, 13, -3, 3));
  const Tensor ta = make(a, {3, 4});
  const Shape s{3, 4};
  CHECK_VALUES(add(ta, 2.5), s, map(a, [](double x) { return f32(x + 2.5); }), kExact, 0);
  CHECK_VALUES(mul(ta, -0.5), s, map(a, [](double x) { return x * -0.5; }), kExact, 0);
  CHECK_VALUES(ta + 2.5, s, map(a, [](double x) { return f32(x + 2.5); }), kExact, 0);
  CHECK_VALUES(ta - 1.25, s, map(a, [](double x) { return f32(x - 1.25); }), kExact, 0);
  CHECK_VALUES(ta * 3.0, s, map(a, [](double x) { return f32(x * 3.0); }), kExact, 0);
  CHECK_VALUES(ta / 4.0, s, map(a, [](double x) { return x / 4.0; }), kExact, 0);
  // x / 3 may be computed as x * (1/3): allow one f32 ulp.
  CHECK_VALUES(ta / 3.0, s, map(a, [](double x) { return f32(x / 3.0); }), 0, 1.2e-7);
  CHECK_VALUES(2.5 + ta, s, map(a, [](double x) { return f32(2.5 + x); }), kExact, 0);
  CHECK_VALUES(2.0 - ta, s, map(a, [](double x) { return f32(2.0 - x); }), kExact, 0);
  CHECK_VALUES(3.0 * ta, s, map(a, [](double x) { return f32(3.0 * x); }), kExact, 0);
  CHECK_VALUES(-ta, s, map(a, [](double x) { return -x; }), kExact, 0);
  CHECK_VALUES(neg(ta), s, map(a, [](double x) { return -x; }), kExact, 0);
}

TEST_CASE("unary math functions match double-precision references") {
  const auto any = round_to_f32(rgtest::random_values(40, 21, -4, 4));
  const auto pos = round_to_f32(rgtest::random_values(40, 22, 0.05, 5));
  const Shape s{5, 8};
  const Tensor t_any = make(any, s), t_pos = make(pos, s);

  CHECK_VALUES(ringgrad::abs(t_any), s, map(any, [](double x) { return std::fabs(x); }), kExact, 0);
  CHECK_VALUES(relu(t_any), s, map(any, [](double x) { return x > 0 ? x : 0.0; }), kExact, 0);
  CHECK_VALUES(clamp(t_any, -0.5, 1.5), s, map(any, [](double x) { return std::clamp(x, -0.5, 1.5); }), kExact, 0);
  CHECK_VALUES(ringgrad::sqrt(t_pos), s, map(pos, [](double x) { return f32(std::sqrt(x)); }), kExact, 0);
  CHECK_VALUES(ringgrad::exp(t_any), s, map(any, [](double x) { return std::exp(x); }), kTransAtol, kTransRtol);
  CHECK_VALUES(ringgrad::log(t_pos), s, map(pos, [](double x) { return std::log(x); }), kTransAtol, kTransRtol);
  CHECK_VALUES(rsqrt(t_pos), s, map(pos, [](double x) { return 1.0 / std::sqrt(x); }), kTransAtol, kTransRtol);
  CHECK_VALUES(ringgrad::tanh(t_any), s, map(any, [](double x) { return std::tanh(x); }), kTransAtol, kTransRtol);
  CHECK_VALUES(sigmoid(t_any), s, map(any, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }), kTransAtol,
               kTransRtol);
  CHECK_VALUES(gelu(t_any), s, map(any, gelu_ref), 1e-6, 1e-5);
  CHECK_VALUES(ringgrad::pow(t_pos, 3.0), s, map(pos, [](double x) { return x * x * x; }), kTransAtol, kTransRtol);
  CHECK_VALUES(ringgrad::pow(t_pos, 0.5), s, map(pos, [](double x) { return std::sqrt(x); }), kTransAtol, kTransRtol);
  CHECK_VALUES(ringgrad::pow(t_pos, -1.5), s, map(pos, [](double x) { return std::pow(x, -1.5); }), kTransAtol,
               kTransRtol);
  CHECK_VALUES(ringgrad::pow(t_any, 2.0), s, map(any, [](double x) { return x * x; }), kTransAtol, kTransRtol);

  // The Tensor methods forward to the same ops.
  CHECK_VALUES(t_pos.log(), s, map(pos, [](double x) { return std::log(x); }), kTransAtol, kTransRtol);
  CHECK_VALUES(t_any.relu(), s, map(any, [](double x) { return x > 0 ? x : 0.0; }), kExact, 0);
  CHECK_VALUES(t_any.pow(2.0), s, map(any, [](double x) { return x * x; }), kTransAtol, kTransRtol);
}

TEST_CASE("closed-form values of the activation functions") {
  const Tensor x = make({0.0, 1.0, -1.0, 2.0}, {4});
  const double k = std::sqrt(2.0 / M_PI);
  CHECK_VALUES(gelu(x), Shape({4}),
               (std::vector<double>{0.0, 0.5 * (1 + std::tanh(k * 1.044715)), -0.5 * (1 - std::tanh(k * 1.044715)),
                                    1.0 + std::tanh(k * (2 + 0.044715 * 8))}),
               1e-7, 1e-6);
  CHECK_VALUES(sigmoid(x), Shape({4}),
               (std::vector<double>{0.5, 1 / (1 + std::exp(-1.0)), 1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-2.0))}),
               1e-7, 1e-6);
  // Saturation without NaN: sigmoid(±100), tanh(±100), exp(-100)
  const Tensor big = make({100, -100}, {2});
  CHECK_VALUES(sigmoid(big), Shape({2}), (std::vector<double>{1.0, 1 / (1 + std::exp(100.0))}), 1e-30, 1e-6);
  CHECK_VALUES(ringgrad::tanh(big), Shape({2}), (std::vector<double>{1.0, -1.0}), 0, 0);
  CHECK_VALUES(relu(make({-0.0, 0.0, 3.0}, {3})), Shape({3}), (std::vector<double>{0, 0, 3}), 0, 0);
}

TEST_CASE("where selects by a u8 condition and broadcasts all three operands") {
  const Tensor cond = make({1, 0, 0, 1}, {4}, DType::u8);
  const Tensor a = make({1, 2, 3, 4}, {4}), b = make({-1, -2, -3, -4}, {4});
  CHECK_VALUES(where(cond, a, b), Shape({4}), (std::vector<double>{1, -2, -3, 4}), 0, 0);

  // cond (2, 1), a (1, 3), b scalar-like (1): out[i][j] = cond[i] ? a[j] : b
  const Tensor c2 = make({0, 1}, {2, 1}, DType::u8);
  const Tensor a2 = make({5, 6, 7}, {1, 3}), b2 = make({9}, {1});
  CHECK_VALUES(where(c2, a2, b2), Shape({2, 3}), (std::vector<double>{9, 9, 9, 5, 6, 7}), 0, 0);

  // The usual pattern: where(gt(a, b), a, b) is the elementwise maximum.
  const auto x = round_to_f32(rgtest::random_values(10, 31));
  const auto y = round_to_f32(rgtest::random_values(10, 32));
  CHECK_VALUES(where(gt(make(x, {10}), make(y, {10})), make(x, {10}), make(y, {10})), Shape({10}),
               map2(x, y, [](double p, double q) { return std::max(p, q); }), 0, 0);
}

TEST_CASE("comparisons return u8 zeros and ones and broadcast") {
  const Tensor a = make({1, 2, 3, 4}, {4});
  const Tensor b = make({4, 2, 2, 5}, {4});
  CHECK(eq(a, b).dtype() == DType::u8);
  CHECK_VALUES(eq(a, b), Shape({4}), (std::vector<double>{0, 1, 0, 0}), 0, 0);
  CHECK_VALUES(ne(a, b), Shape({4}), (std::vector<double>{1, 0, 1, 1}), 0, 0);
  CHECK_VALUES(lt(a, b), Shape({4}), (std::vector<double>{1, 0, 0, 1}), 0, 0);
  CHECK_VALUES(le(a, b), Shape({4}), (std::vector<double>{1, 1, 0, 1}), 0, 0);
  CHECK_VALUES(gt(a, b), Shape({4}), (std::vector<double>{0, 0, 1, 0}), 0, 0);
  CHECK_VALUES(ge(a, b), Shape({4}), (std::vector<double>{0, 1, 1, 0}), 0, 0);
  // (2, 1) vs (4): out[i][j] = col[i] < a[j]
  const Tensor col = make({2, 3}, {2, 1});
  CHECK_VALUES(lt(col, a), Shape({2, 4}), (std::vector<double>{0, 0, 1, 1, 0, 0, 0, 1}), 0, 0);
  // comparisons work on integer tensors too
  CHECK_VALUES(gt(make_i64({1, 5}, {2}), make_i64({3, 3}, {2})), Shape({2}), (std::vector<double>{0, 1}), 0, 0);
}

// ---- reductions -------------------------------------------------------------------------------

TEST_CASE("sum and mean reduce over the given dims with and without keepdim") {
  const Shape s{2, 3, 4};
  const auto v = round_to_f32(rgtest::random_values(24, 41, -2, 2));
  const Tensor x = make(v, s);
  auto at = [&](int a, int b, int c) { return v[static_cast<size_t>(12 * a + 4 * b + c)]; };

  double total = 0;
  for (double e : v) total += e;
  Tensor all = x.sum();
  CHECK(all.dim() == 0);
  CHECK(all.item() == doctest::Approx(total).epsilon(kReduceRtol));
  CHECK_VALUES(sum(x, {}, true), Shape({1, 1, 1}), (std::vector<double>{total}), kReduceAtol, kReduceRtol);
  CHECK(mean(x).item() == doctest::Approx(total / 24).epsilon(kReduceRtol));

  std::vector<double> over02(3, 0.0);  // sum over dims 0 and 2
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) over02[b] += at(a, b, c);
  CHECK_VALUES(sum(x, {0, 2}), Shape({3}), over02, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum(x, {0, 2}, true), Shape({1, 3, 1}), over02, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum(x, {2, 0}), Shape({3}), over02, kReduceAtol, kReduceRtol);  // dim order does not matter
  CHECK_VALUES(mean(x, {0, 2}), Shape({3}), map(over02, [](double e) { return e / 8; }), kReduceAtol, kReduceRtol);

  std::vector<double> last(6, 0.0);  // sum over dim -1
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) last[static_cast<size_t>(3 * a + b)] += at(a, b, c);
  CHECK_VALUES(x.sum({-1}), Shape({2, 3}), last, kReduceAtol, kReduceRtol);
  CHECK_VALUES(x.mean({-1}, true), Shape({2, 3, 1}), map(last, [](double e) { return e / 4; }), kReduceAtol,
               kReduceRtol);
}

// Leading dims of a dense tensor take the column path (no transposed copy); check it against the
// double loop, for sum and mean, keepdim, f64, f16 and enough columns to be split over threads.
TEST_CASE("sum and mean over leading dims (bias gradients) match the double loop") {
  const Shape s{3, 5, 70};
  const auto v = round_to_f32(rgtest::random_values(3 * 5 * 70, 43, -2, 2));
  std::vector<double> over01(70, 0.0), over0(5 * 70, 0.0);
  for (size_t i = 0; i < v.size(); ++i) over01[i % 70] += v[i], over0[i % 350] += v[i];
  const Tensor x = make(v, s);
  CHECK_VALUES(sum(x, {0, 1}), Shape({70}), over01, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum(x, {1, 0}, true), Shape({1, 1, 70}), over01, kReduceAtol, kReduceRtol);
  CHECK_VALUES(mean(x, {0}), Shape({5, 70}), map(over0, [](double e) { return e / 3; }), kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum(x.to(DType::f64), {0, 1}), Shape({70}), over01, 1e-12, 1e-12);
  Tensor h = sum(x.to(DType::f16), {0, 1});
  CHECK(h.dtype() == DType::f16);
  CHECK(max_abs_diff(h.to(DType::f32), sum(x.to(DType::f16).to(DType::f32), {0, 1})) <= 0.02);
  const Tensor wide = make(std::vector<double>(4 * 40000, 0.5), {4, 40000});  // columns across threads
  CHECK(max_abs_diff(sum(wide, {0}), full({40000}, 2.0)) == 0.0);
}

TEST_CASE("sum accumulates in double so f32 cancellation does not lose small terms") {
  // 1e8 + 1 + 1 + ... - 1e8: in f32, each +1 onto 1e8 would be lost (ulp(1e8) = 8).
  std::vector<double> v = {1e8};
  for (int i = 0; i < 64; ++i) v.push_back(1.0);
  v.push_back(-1e8);
  CHECK(make(v, {66}).sum().item() == 64.0);
}

TEST_CASE("var is unbiased by default and biased on request") {
  const auto v = round_to_f32(rgtest::random_values(12, 51, -2, 2));
  const Tensor x = make(v, {3, 4});
  auto var_ref = [](const std::vector<double>& xs, bool unbiased) {
    double m = 0;
    for (double e : xs) m += e;
    m /= static_cast<double>(xs.size());
    double ss = 0;
    for (double e : xs) ss += (e - m) * (e - m);
    return ss / static_cast<double>(xs.size() - (unbiased ? 1 : 0));
  };
  CHECK(x.var().item() == doctest::Approx(var_ref(v, true)).epsilon(1e-6));
  CHECK(x.var({}, false, false).item() == doctest::Approx(var_ref(v, false)).epsilon(1e-6));

  std::vector<double> rows_u, rows_b, cols_u;
  for (int i = 0; i < 3; ++i) {
    std::vector<double> row(v.begin() + 4 * i, v.begin() + 4 * i + 4);
    rows_u.push_back(var_ref(row, true));
    rows_b.push_back(var_ref(row, false));
  }
  for (int j = 0; j < 4; ++j) cols_u.push_back(var_ref({v[j], v[4 + j], v[8 + j]}, true));
  CHECK_VALUES(x.var({1}), Shape({3}), rows_u, 1e-7, 1e-6);
  CHECK_VALUES(var(x, {1}, true, false), Shape({3, 1}), rows_b, 1e-7, 1e-6);
  CHECK_VALUES(var(x, {0}, true), Shape({1, 4}), cols_u, 1e-7, 1e-6);
  // Closed form: var of 1, 2, 3, 4 is 5/3 unbiased, 5/4 biased.
  CHECK(make({1, 2, 3, 4}, {4}).var().item() == doctest::Approx(5.0 / 3.0).epsilon(1e-7));
  CHECK(make({1, 2, 3, 4}, {4}).var({0}, false, false).item() == 1.25);
}

TEST_CASE("max returns values and argmax returns i64 indices along a dim") {
  // x[i][j]; row maxima at columns 2, 0, 3; column maxima at rows 1, 2, 0, 2
  const Tensor x = make({1, 5, 9, -2,   //
                         8, -1, 0, 3,   //
                         4, 6, 7, 10},  //
                        {3, 4});
  CHECK_VALUES(ringgrad::max(x, 1), Shape({3}), (std::vector<double>{9, 8, 10}), 0, 0);
  CHECK_VALUES(ringgrad::max(x, 1, true), Shape({3, 1}), (std::vector<double>{9, 8, 10}), 0, 0);
  CHECK_VALUES(ringgrad::max(x, 0), Shape({4}), (std::vector<double>{8, 6, 9, 10}), 0, 0);
  CHECK_VALUES(x.max(-1), Shape({3}), (std::vector<double>{9, 8, 10}), 0, 0);
  Tensor am = argmax(x, 1);
  CHECK(am.dtype() == DType::i64);
  CHECK_VALUES(am, Shape({3}), (std::vector<double>{2, 0, 3}), 0, 0);
  CHECK_VALUES(argmax(x, 0, true), Shape({1, 4}), (std::vector<double>{1, 2, 0, 2}), 0, 0);
  CHECK_VALUES(x.argmax(-2), Shape({4}), (std::vector<double>{1, 2, 0, 2}), 0, 0);
  // all-negative rows: the max is not 0
  CHECK_VALUES(ringgrad::max(make({-3, -1, -2}, {1, 3}), 1), Shape({1}), (std::vector<double>{-1}), 0, 0);
}

TEST_CASE("sum_to sums a broadcast result back to the shape it came from") {
  const auto v = round_to_f32(rgtest::random_values(24, 61, -2, 2));
  const Tensor x = make(v, {2, 3, 4});
  auto at = [&](int a, int b, int c) { return v[static_cast<size_t>(12 * a + 4 * b + c)]; };

  std::vector<double> to31(3, 0.0), to4(4, 0.0), to134(12, 0.0), to1(1, 0.0);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) {
        to31[b] += at(a, b, c);
        to4[c] += at(a, b, c);
        to134[static_cast<size_t>(4 * b + c)] += at(a, b, c);
        to1[0] += at(a, b, c);
      }
  CHECK_VALUES(sum_to(x, {3, 1}), Shape({3, 1}), to31, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum_to(x, {4}), Shape({4}), to4, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum_to(x, {1, 3, 4}), Shape({1, 3, 4}), to134, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum_to(x, {1, 1}), Shape({1, 1}), to1, kReduceAtol, kReduceRtol);
  CHECK_VALUES(sum_to(x, {2, 3, 4}), Shape({2, 3, 4}), v, 0, 0);  // already that shape
  CHECK_THROWS_AS(sum_to(x, {5}), ringgrad::Error);               // (5) does not broadcast to (2, 3, 4)
}

// ---- linear algebra ---------------------------------------------------------------------------

TEST_CASE("matmul of two vectors is their dot product as a 0-dim tensor") {
  const auto a = round_to_f32(rgtest::random_values(7, 71)), b = round_to_f32(rgtest::random_values(7, 72));
  double dot = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i];
  Tensor r = matmul(make(a, {7}), make(b, {7}));
  CHECK(r.dim() == 0);
  CHECK(std::fabs(r.item() - dot) <= kGemmAtol);
}

TEST_CASE("matmul, mm and bmm of matrices and batches match a double triple loop") {
  const auto a = round_to_f32(rgtest::random_values(12, 73)), b = round_to_f32(rgtest::random_values(8, 74));
  const auto ab = matmul_ref(a, b, 1, 3, 4, 2);
  CHECK_VALUES(matmul(make(a, {3, 4}), make(b, {4, 2})), Shape({3, 2}), ab, kGemmAtol, 0);
  CHECK_VALUES(mm(make(a, {3, 4}), make(b, {4, 2})), Shape({3, 2}), ab, kGemmAtol, 0);

  const auto ba = round_to_f32(rgtest::random_values(2 * 3 * 4, 75));
  const auto bb = round_to_f32(rgtest::random_values(2 * 4 * 5, 76));
  const auto bab = matmul_ref(ba, bb, 2, 3, 4, 5);
  CHECK_VALUES(bmm(make(ba, {2, 3, 4}), make(bb, {2, 4, 5})), Shape({2, 3, 5}), bab, kGemmAtol, 0);
  CHECK_VALUES(matmul(make(ba, {2, 3, 4}), make(bb, {2, 4, 5})), Shape({2, 3, 5}), bab, kGemmAtol, 0);

  // (2, 3, 4) @ (4, 5): the matrix is shared by every batch
  const auto shared = matmul_ref(ba, std::vector<double>(bb.begin(), bb.begin() + 20), 2, 3, 4, 5, true);
  CHECK_VALUES(matmul(make(ba, {2, 3, 4}), make(std::vector<double>(bb.begin(), bb.begin() + 20), {4, 5})),
               Shape({2, 3, 5}), shared, kGemmAtol, 0);

  CHECK_THROWS_AS(mm(make(ba, {2, 3, 4}), make(bb, {2, 4, 5})), ringgrad::Error);  // mm is 2-D only
  CHECK_THROWS_AS(bmm(make(a, {3, 4}), make(b, {4, 2})), ringgrad::Error);         // bmm is 3-D only
}

TEST_CASE("matmul broadcasts batch dimensions") {
  // (2, 1, 3, 4) @ (5, 4, 2) -> (2, 5, 3, 2): out[p][q] = a[p][0] @ b[q]
  const auto a = round_to_f32(rgtest::random_values(2 * 3 * 4, 81));
  const auto b = round_to_f32(rgtest::random_values(5 * 4 * 2, 82));
  std::vector<double> expected;
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 5; ++q) {
      const auto block = matmul_ref(std::vector<double>(a.begin() + 12 * p, a.begin() + 12 * p + 12),
                                    std::vector<double>(b.begin() + 8 * q, b.begin() + 8 * q + 8), 1, 3, 4, 2);
      expected.insert(expected.end(), block.begin(), block.end());
    }
  CHECK_VALUES(matmul(make(a, {2, 1, 3, 4}), make(b, {5, 4, 2})), Shape({2, 5, 3, 2}), expected, kGemmAtol, 0);
}

TEST_CASE("matmul of a matrix and a vector follows torch.matmul") {
  // torch.matmul: (M, K) @ (K) -> (M); (K) @ (K, N) -> (N).
  const auto a = round_to_f32(rgtest::random_values(12, 83)), v = round_to_f32(rgtest::random_values(4, 84));
  CHECK_VALUES(matmul(make(a, {3, 4}), make(v, {4})), Shape({3}), matmul_ref(a, v, 1, 3, 4, 1), kGemmAtol, 0);
  const auto w = round_to_f32(rgtest::random_values(3, 85));
  CHECK_VALUES(matmul(make(w, {3}), make(a, {3, 4})), Shape({4}), matmul_ref(w, a, 1, 1, 3, 4), kGemmAtol, 0);
}

TEST_CASE("linear computes x times w transposed plus b") {
  // x: (2, 3, 4), w: (5, 4), b: (5) -> (2, 3, 5)
  const auto x = round_to_f32(rgtest::random_values(24, 91));
  const auto w = round_to_f32(rgtest::random_values(20, 92));
  const auto b = round_to_f32(rgtest::random_values(5, 93));
  std::vector<double> no_bias, with_bias;
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      double acc = 0;
      for (int i = 0; i < 4; ++i) acc += x[static_cast<size_t>(4 * r + i)] * w[static_cast<size_t>(4 * o + i)];
      no_bias.push_back(acc);
      with_bias.push_back(acc + b[static_cast<size_t>(o)]);
    }
  CHECK_VALUES(linear(make(x, {2, 3, 4}), make(w, {5, 4}), make(b, {5})), Shape({2, 3, 5}), with_bias, kGemmAtol, 0);
  CHECK_VALUES(linear(make(x, {2, 3, 4}), make(w, {5, 4})), Shape({2, 3, 5}), no_bias, kGemmAtol, 0);
  CHECK_VALUES(linear(make(x, {6, 4}), make(w, {5, 4}), make(b, {5})), Shape({6, 5}), with_bias, kGemmAtol, 0);
}

// ---- softmax and losses -----------------------------------------------------------------------

namespace {
std::vector<double> log_softmax_ref(const std::vector<double>& row) {
  const double m = *std::max_element(row.begin(), row.end());
  double s = 0;
  for (double e : row) s += std::exp(e - m);
  std::vector<double> out;
  for (double e : row) out.push_back(e - m - std::log(s));
  return out;
}
}  // namespace

TEST_CASE("softmax and log_softmax stay finite and exact for inputs around 1000") {
  const std::vector<double> big = {1000, 1001, 1002, 1000, -1000, 0, 1000, 999.5};
  const Tensor x = make(big, {2, 4});
  std::vector<double> ls, sm;
  for (int r = 0; r < 2; ++r) {
    const auto row = log_softmax_ref(std::vector<double>(big.begin() + 4 * r, big.begin() + 4 * r + 4));
    for (double e : row) {
      ls.push_back(e);
      sm.push_back(std::exp(e));
    }
  }
  CHECK_VALUES(log_softmax(x, 1), Shape({2, 4}), ls, 1e-6, 1e-6);
  CHECK_VALUES(softmax(x, -1), Shape({2, 4}), sm, 1e-7, 1e-6);
  CHECK_VALUES(x.softmax(1).sum({1}), Shape({2}), (std::vector<double>{1, 1}), 1e-6, 0);
  // exp(-2000) underflows to 0 in any precision; log_softmax keeps the exact -2000.
  CHECK(log_softmax(make({-1000, 1000}, {2}), 0).to_vector()[0] == -2000.0);
}

TEST_CASE("softmax over dim 0 normalises columns") {
  const auto v = round_to_f32(rgtest::random_values(12, 101, -5, 5));
  const Tensor x = make(v, {3, 4});
  std::vector<double> expected(12);
  for (int j = 0; j < 4; ++j) {
    const auto col = log_softmax_ref({v[j], v[4 + j], v[8 + j]});
    for (int i = 0; i < 3; ++i) expected[static_cast<size_t>(4 * i + j)] = col[static_cast<size_t>(i)];
  }
  CHECK_VALUES(log_softmax(x, 0), Shape({3, 4}), expected, 1e-6, 1e-6);
  CHECK_VALUES(softmax(x, 0), Shape({3, 4}), map(expected, [](double e) { return std::exp(e); }), 1e-7, 1e-6);
}

TEST_CASE("cross_entropy is the mean negative log-likelihood over targets that are not ignored") {
  const auto v = round_to_f32(rgtest::random_values(20, 111, -3, 3));
  const Tensor logits = make(v, {4, 5});
  auto nll = [&](int row, int cls) {
    return -log_softmax_ref(
        std::vector<double>(v.begin() + 5 * row, v.begin() + 5 * row + 5))[static_cast<size_t>(cls)];
  };
  const double all4 = (nll(0, 1) + nll(1, 4) + nll(2, 0) + nll(3, 3)) / 4;
  Tensor loss = cross_entropy(logits, make_i64({1, 4, 0, 3}, {4}));
  CHECK(loss.dim() == 0);
  CHECK(loss.item() == doctest::Approx(all4).epsilon(1e-6));

  // ignore_index = -100 (default): row 2 does not count, the mean is over 3 rows
  const double three = (nll(0, 1) + nll(1, 4) + nll(3, 3)) / 3;
  CHECK(cross_entropy(logits, make_i64({1, 4, -100, 3}, {4})).item() == doctest::Approx(three).epsilon(1e-6));

  // a custom ignore_index that is also a valid class
  const double custom = (nll(2, 1) + nll(3, 0)) / 2;
  CHECK(cross_entropy(logits, make_i64({2, 2, 1, 0}, {4}), 2).item() == doctest::Approx(custom).epsilon(1e-6));

  // all ignored: 0, not NaN
  CHECK(cross_entropy(logits, make_i64({-100, -100, -100, -100}, {4})).item() == 0.0);

  // large logits: the fused log-softmax stays finite. Row (1000, 0), class 1: loss 1000;
  // row (-1000, 1000), class 0: loss 2000.
  const Tensor big = make({1000, 0, -1000, 1000}, {2, 2});
  CHECK(cross_entropy(big, make_i64({1, 0}, {2})).item() == doctest::Approx(1500.0).epsilon(1e-6));
}

// ---- joining, splitting, indexing -------------------------------------------------------------

TEST_CASE("cat joins along an existing dim and stack along a new one") {
  const Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = make({7, 8, 9}, {1, 3});
  const Tensor c = make({-1, -2, -3, -4}, {2, 2});
  CHECK_VALUES(cat({a, b}, 0), Shape({3, 3}), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}), 0, 0);
  CHECK_VALUES(cat({a, c}, 1), Shape({2, 5}), (std::vector<double>{1, 2, 3, -1, -2, 4, 5, 6, -3, -4}), 0, 0);
  CHECK_VALUES(cat({c, a, c}, -1), Shape({2, 7}),
               (std::vector<double>{-1, -2, 1, 2, 3, -1, -2, -3, -4, 4, 5, 6, -3, -4}), 0, 0);
  // a transposed input: c.t() = (-1, -3; -2, -4)
  CHECK_VALUES(cat({c.t(), c}, 0), Shape({4, 2}), (std::vector<double>{-1, -3, -2, -4, -1, -2, -3, -4}), 0, 0);
  CHECK_THROWS_AS(cat({a, c}, 0), ringgrad::Error);  // (2, 3) and (2, 2) differ outside dim 0

  const Tensor d = make({10, 20, 30, 40, 50, 60}, {2, 3});
  CHECK_VALUES(stack({a, d}, 0), Shape({2, 2, 3}), (std::vector<double>{1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}), 0,
               0);
  CHECK_VALUES(stack({a, d}, 1), Shape({2, 2, 3}), (std::vector<double>{1, 2, 3, 10, 20, 30, 4, 5, 6, 40, 50, 60}), 0,
               0);
  CHECK_VALUES(stack({a, d}, -1), Shape({2, 3, 2}), (std::vector<double>{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60}), 0,
               0);
  CHECK_THROWS_AS(stack({a, b}, 0), ringgrad::Error);
}

TEST_CASE("split returns views of split_size with a shorter last piece") {
  std::vector<double> v;
  for (int i = 0; i < 14; ++i) v.push_back(i);
  const Tensor x = make(v, {7, 2});
  auto pieces = split(x, 3, 0);
  REQUIRE(pieces.size() == 3);
  CHECK_VALUES(pieces[0], Shape({3, 2}), (std::vector<double>{0, 1, 2, 3, 4, 5}), 0, 0);
  CHECK_VALUES(pieces[1], Shape({3, 2}), (std::vector<double>{6, 7, 8, 9, 10, 11}), 0, 0);
  CHECK_VALUES(pieces[2], Shape({1, 2}), (std::vector<double>{12, 13}), 0, 0);
  CHECK(pieces[1].storage().get() == x.storage().get());
  auto cols = split(x, 1, 1);
  REQUIRE(cols.size() == 2);
  CHECK_VALUES(cols[1], Shape({7, 1}), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}), 0, 0);
}

TEST_CASE("index_select and gather pick elements by i64 indices") {
  const Tensor x = make({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23}, {3, 4});  // x[i][j] = 10i + j
  CHECK_VALUES(index_select(x, 0, make_i64({2, 0, 2}, {3})), Shape({3, 4}),
               (std::vector<double>{20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23}), 0, 0);
  CHECK_VALUES(index_select(x, 1, make_i64({3, 1}, {2})), Shape({3, 2}), (std::vector<double>{3, 1, 13, 11, 23, 21}), 0,
               0);
  CHECK_VALUES(index_select(x, -1, make_i64({0}, {1})), Shape({3, 1}), (std::vector<double>{0, 10, 20}), 0, 0);

  // dim 1: out[i][j] = x[i][idx[i][j]]
  CHECK_VALUES(gather(x, 1, make_i64({3, 3, 0, 1, 2, 0}, {3, 2})), Shape({3, 2}),
               (std::vector<double>{3, 3, 10, 11, 22, 20}), 0, 0);
  // dim 0: out[i][j] = x[idx[i][j]][j]
  CHECK_VALUES(gather(x, 0, make_i64({2, 0, 1, 2, 0, 0, 0, 1}, {2, 4})), Shape({2, 4}),
               (std::vector<double>{20, 1, 12, 23, 0, 1, 2, 13}), 0, 0);
  CHECK_THROWS_AS(index_select(x, 0, make_i64({3}, {1})), ringgrad::Error);  // out of range
  CHECK_THROWS_AS(gather(x, 1, make_i64({4}, {1, 1})), ringgrad::Error);
}

TEST_CASE("one_hot turns indices into rows of the identity") {
  Tensor oh = one_hot(make_i64({0, 2, 1}, {3}), 3);
  CHECK(oh.dtype() == DType::f32);
  CHECK_VALUES(oh, Shape({3, 3}), (std::vector<double>{1, 0, 0, 0, 0, 1, 0, 1, 0}), 0, 0);
  Tensor oh2 = one_hot(make_i64({3, 0, 1, 1}, {2, 2}), 4, DType::i64);
  CHECK(oh2.dtype() == DType::i64);
  CHECK_VALUES(oh2, Shape({2, 2, 4}), (std::vector<double>{0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}), 0, 0);
  CHECK_THROWS_AS(one_hot(make_i64({3}, {1}), 3), ringgrad::Error);
}

// ---- factories --------------------------------------------------------------------------------

TEST_CASE("zeros, ones, full and empty make tensors of the requested shape and dtype") {
  CHECK_VALUES(zeros({2, 3}), Shape({2, 3}), std::vector<double>(6, 0.0), 0, 0);
  CHECK_VALUES(ones({4}), Shape({4}), std::vector<double>(4, 1.0), 0, 0);
  CHECK_VALUES(full({3, 1}, -2.5), Shape({3, 1}), std::vector<double>(3, -2.5), 0, 0);
  CHECK(zeros({2}).dtype() == DType::f32);
  CHECK(zeros({2, 2}, {.dtype = DType::i32}).dtype() == DType::i32);
  CHECK_VALUES(ones({2}, {.dtype = DType::f16}), Shape({2}), (std::vector<double>{1, 1}), 0, 0);
  CHECK_VALUES(full({2}, 7, {.dtype = DType::u8}), Shape({2}), (std::vector<double>{7, 7}), 0, 0);
  CHECK_VALUES(full({2}, 0.1, {.dtype = DType::f64}), Shape({2}), (std::vector<double>{0.1, 0.1}), 0, 0);
  Tensor e = empty({5, 6}, {.dtype = DType::bf16});
  CHECK(e.shape() == Shape{5, 6});
  CHECK(e.dtype() == DType::bf16);
  CHECK(e.is_contiguous());
  CHECK(e.nbytes() == 60);
  CHECK(zeros({0, 3}).numel() == 0);

  const Tensor ref = make({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  CHECK_VALUES(zeros_like(ref), Shape({2, 3}), std::vector<double>(6, 0.0), 0, 0);
  CHECK_VALUES(ones_like(ref), Shape({2, 3}), std::vector<double>(6, 1.0), 0, 0);
  CHECK(ones_like(ref).dtype() == DType::f64);
  CHECK(empty_like(ref).shape() == Shape{2, 3});
  CHECK(empty_like(ref).dtype() == DType::f64);
  CHECK(zeros({2}, {.dtype = DType::f32, .requires_grad = true}).requires_grad());
}

TEST_CASE("arange counts from start up to but excluding end") {
  CHECK_VALUES(arange(0, 5), Shape({5}), (std::vector<double>{0, 1, 2, 3, 4}), 0, 0);
  CHECK_VALUES(arange(1, 2, 0.25), Shape({4}), (std::vector<double>{1, 1.25, 1.5, 1.75}), 0, 0);
  CHECK_VALUES(arange(5, 0, -2), Shape({3}), (std::vector<double>{5, 3, 1}), 0, 0);
  Tensor i = arange(0, 3, 1, {.dtype = DType::i64});
  CHECK(i.dtype() == DType::i64);
  CHECK_VALUES(i, Shape({3}), (std::vector<double>{0, 1, 2}), 0, 0);
}

TEST_CASE("from_vector, from_blob and scalar_tensor copy host values") {
  Tensor fv = from_vector(std::vector<float>{1.5f, -2.0f}, {2});
  CHECK(fv.dtype() == DType::f32);
  CHECK_VALUES(fv, Shape({2}), (std::vector<double>{1.5, -2}), 0, 0);
  Tensor iv = from_vector(std::vector<int64_t>{int64_t{1} << 40, -3}, {2}, {.dtype = DType::i64});
  CHECK(iv.data<int64_t>()[0] == (int64_t{1} << 40));
  CHECK(iv.data<int64_t>()[1] == -3);
  Tensor dv = from_vector(std::vector<double>{0.1}, {1});  // converted to the default f32
  CHECK(dv.item() == static_cast<double>(0.1f));
  CHECK_THROWS_AS(from_vector(std::vector<double>{1, 2, 3}, {2, 2}), ringgrad::Error);

  float blob[6] = {1, 2, 3, 4, 5, 6};
  Tensor b = from_blob(blob, {2, 3}, DType::f32);
  blob[0] = 100;  // from_blob copied the bytes
  CHECK_VALUES(b, Shape({2, 3}), (std::vector<double>{1, 2, 3, 4, 5, 6}), 0, 0);
  int32_t ints[3] = {-7, 0, 2147483647};
  Tensor bi = from_blob(ints, {3}, DType::i32);
  CHECK(bi.dtype() == DType::i32);
  CHECK_VALUES(bi, Shape({3}), (std::vector<double>{-7, 0, 2147483647}), 0, 0);

  Tensor s = scalar_tensor(3.5);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.5);
  CHECK(scalar_tensor(0.1, {.dtype = DType::f64}).item() == 0.1);
}

// ---- in-place ---------------------------------------------------------------------------------

TEST_CASE("in-place ops modify the tensor they are called on and return it") {
  Tensor x = zeros({2, 3});
  CHECK(&x.fill_(2.5) == &x);
  CHECK_VALUES(x, Shape({2, 3}), std::vector<double>(6, 2.5), 0, 0);
  x.zero_();
  CHECK_VALUES(x, Shape({2, 3}), std::vector<double>(6, 0.0), 0, 0);

  // copy_ broadcasts a row into every row
  x.copy_(make({1, 2, 3}, {3}));
  CHECK_VALUES(x, Shape({2, 3}), (std::vector<double>{1, 2, 3, 1, 2, 3}), 0, 0);
  // copy_ converts dtype: f64 0.1 lands as the nearest f32
  x.copy_(make({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, {2, 3}, DType::f64));
  CHECK_VALUES(x, Shape({2, 3}), round_to_f32({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}), 0, 0);
  Tensor h = zeros({2}, {.dtype = DType::f16});
  h.copy_(make({1.0 + 1.0 / 2048, 3.0}, {2}));  // 1 + 2^-11 is a tie: rounds to even (1.0)
  CHECK_VALUES(h, Shape({2}), (std::vector<double>{1.0, 3.0}), 0, 0);

  Tensor y = make({1, 2, 3, 4, 5, 6}, {2, 3});
  y.add_(make({10, 20, 30}, {3}), 0.5);  // y += 0.5 * row
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{6, 12, 18, 9, 15, 21}), 0, 0);
  y.add_(make({1, 1, 1, 1, 1, 1}, {2, 3}));
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{7, 13, 19, 10, 16, 22}), 0, 0);
  y.sub_(make({1, 3}, {2, 1}));
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{6, 12, 18, 7, 13, 19}), 0, 0);
  y.mul_(make({2, 0.5, 1}, {3}));
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{12, 6, 18, 14, 6.5, 19}), 0, 0);
  y.div_(make({4}, {1}));
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{3, 1.5, 4.5, 3.5, 1.625, 4.75}), 0, 0);
  y.add_(-1.5);
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{1.5, 0, 3, 2, 0.125, 3.25}), 0, 0);
  y.mul_(2.0);
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{3, 0, 6, 4, 0.25, 6.5}), 0, 0);
  y.clamp_(0.5, 5);
  CHECK_VALUES(y, Shape({2, 3}), (std::vector<double>{3, 0.5, 5, 4, 0.5, 5}), 0, 0);

  CHECK_THROWS_AS(y.add_(make({1, 2}, {2})), ringgrad::Error);               // (2) does not broadcast to (2, 3)
  CHECK_THROWS_AS(make({1}, {1}).add_(make({1, 2}, {2})), ringgrad::Error);  // cannot grow self
}

// ---- values, printing, comparison helpers -----------------------------------------------------

TEST_CASE("item returns the only element and rejects larger tensors") {
  CHECK(make({4.25}, {1, 1}).item() == 4.25);
  CHECK(make({7}, {1}, DType::i64).item<int64_t>() == 7);
  CHECK(make({-3}, {1}, DType::i32).item<int>() == -3);
  CHECK_THROWS_AS(make({1, 2}, {2}).item(), ringgrad::Error);
}

TEST_CASE("str prints the values of a small tensor and abbreviates a large one") {
  const Tensor small = make({1.5, -2, 3.25, 4}, {2, 2});
  const std::string s = small.str();
  INFO("str() = " << s);
  CHECK(rgtest::contains(s, "1.5"));
  CHECK(rgtest::contains(s, "-2"));
  CHECK(rgtest::contains(s, "3.25"));
  CHECK_FALSE(rgtest::contains(s, "..."));
  std::ostringstream os;
  os << small;
  CHECK(os.str() == s);

  const Tensor large = arange(0, 100000).view({1000, 100});
  const std::string l = large.str();
  INFO("str() = " << l.substr(0, 2000));
  CHECK(rgtest::contains(l, "..."));
  CHECK(l.size() < 5000);  // abbreviated, not 100000 numbers
}

TEST_CASE("equal, allclose and max_abs_diff compare values") {
  const Tensor a = make({1, 2, 3}, {3});
  CHECK(equal(a, make({1, 2, 3}, {3})));
  CHECK_FALSE(equal(a, make({1, 2, 4}, {3})));
  CHECK_FALSE(equal(a, make({1, 2, 3}, {3, 1})));  // shapes differ
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(equal(make({nan, 1}, {2}), make({nan, 1}, {2})));

  // |a - b| <= atol + rtol * |b|: the tolerance scales with the second argument
  CHECK(allclose(make({2}, {1}), make({1}, {1}), 1.0, 0.0));
  CHECK_FALSE(allclose(make({2}, {1}), make({1}, {1}), 0.5, 0.0));  // 1 > 0.5 * 1
  CHECK(allclose(make({1}, {1}), make({2}, {1}), 0.5, 0.0));        // 1 <= 0.5 * 2
  CHECK(allclose(make({1}, {1}), make({1.5}, {1}), 0.0, 0.5));
  CHECK_FALSE(allclose(make({1}, {1}), make({1.5}, {1}), 0.0, 0.25));
  CHECK(allclose(make({1}, {1}), make({1 + 1e-6}, {1})));  // default rtol 1e-5

  CHECK(max_abs_diff(a, make({1, 2.5, 1}, {3})) == 2.0);
  CHECK(max_abs_diff(a, a) == 0.0);
  CHECK_THROWS_AS(max_abs_diff(a, make({1, 2}, {2})), ringgrad::Error);
}

TEST_CASE("reductions and indexing handle empty tensors and size-1 dims") {
  CHECK_VALUES(sum(zeros({0, 3}), {0}), Shape({3}), (std::vector<double>{0, 0, 0}), 0, 0);
  CHECK(zeros({0, 3}).sum().item() == 0.0);
  CHECK_VALUES(softmax(make({3, -7}, {2, 1}), 1), Shape({2, 1}), (std::vector<double>{1, 1}), 0, 0);
  CHECK_VALUES(log_softmax(make({3, -7}, {2, 1}), 1), Shape({2, 1}), (std::vector<double>{0, 0}), 0, 0);
  const Tensor x = make({1, 2, 3, 4}, {2, 2});
  CHECK(index_select(x, 0, make_i64({}, {0})).shape() == Shape{0, 2});
  CHECK_VALUES(cat({x}, 0), Shape({2, 2}), (std::vector<double>{1, 2, 3, 4}), 0, 0);
  CHECK_VALUES(cat({x, zeros({0, 2})}, 0), Shape({2, 2}), (std::vector<double>{1, 2, 3, 4}), 0, 0);
  CHECK_VALUES(gather(x, -1, make_i64({1, 1, 0, 0}, {2, 2})), Shape({2, 2}), (std::vector<double>{2, 2, 3, 3}), 0, 0);
  CHECK_NOTHROW((void)zeros({0, 3}).str());
  CHECK(rgtest::contains(scalar_tensor(2.5).str(), "2.5"));
}

TEST_CASE("f16 and bf16 matmul accumulate in f32 and round the result once") {
  // Entries are small integers, exact in f16/bf16, and every partial sum is an integer below 2^11 (f16)
  // or 2^8 (bf16): exact when accumulated in f32, rounded once at the end.
  std::vector<double> a, b;
  for (int i = 0; i < 4 * 64; ++i) a.push_back((i * 7) % 5 - 2);
  for (int i = 0; i < 64 * 3; ++i) b.push_back((i * 3) % 4 - 1);
  const auto want = matmul_ref(a, b, 1, 4, 64, 3);
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << std::string(dtype_name(dt)));
    const Tensor r = mm(make(a, {4, 64}, dt), make(b, {64, 3}, dt));
    CHECK(r.dtype() == dt);
    CHECK_VALUES(r, Shape({4, 3}), want, 0, 0);
  }
}

TEST_CASE("gelu and its backward in f32: the AVX-512 rows give the AVX2 rows' values bit for bit") {
  // 4099 values (a dense row of 16-lane groups and a tail) over the whole range: the exp's clamps
  // (|2u| past 87), values near 0, infinities and a NaN; then a strided view (the elementwise
  // loop's other path) for comparison as well.
  std::vector<double> xv = rgtest::random_values(4099, 41, -12, 12);
  xv[5] = 0, xv[6] = -0.0, xv[7] = 60, xv[8] = -60, xv[9] = INFINITY, xv[10] = -INFINITY, xv[11] = std::nan("");
  const Tensor x = make(xv, {4099}), g = make(rgtest::random_values(4099, 42), {4099});
  std::vector<std::vector<double>> forward, backward;
  for (ringgrad::CpuIsa isa : rgtest::isas_to_test("gelu")) {
    rgtest::IsaScope scope(isa);
    forward.push_back(gelu(x).to_vector());
    Tensor leaf = x.detach().requires_grad_(true);
    gelu(leaf).backward(g);
    backward.push_back(leaf.grad().to_vector());
    // against the double formula, where it is finite
    for (size_t i = 12; i < xv.size(); ++i)
      CHECK(forward.back()[i] == doctest::Approx(gelu_ref(xv[i])).epsilon(1e-5).scale(1e-6));
  }
  for (size_t k = 1; k < forward.size(); ++k) {
    for (size_t i = 0; i < xv.size(); ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(&forward[k][i], &forward[0][i], sizeof(double)) == 0);
      CHECK(std::memcmp(&backward[k][i], &backward[0][i], sizeof(double)) == 0);
    }
  }
}
