// Views: shape/stride/offset bookkeeping over a shared storage, and the promise that every op gives
// the same answer on a strided view as on its packed copy.
//
// Expected values are written out from index arithmetic (element [i][j] of a (R, C) iota is i*C + j),
// never computed by the library. Small integers are exact in f32, so those checks are exact.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "test_util.h"

using namespace ringgrad;
using rgtest::make;

namespace {

std::vector<double> iota(int64_t n, double start = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

}  // namespace

TEST_CASE("view reshapes a contiguous tensor without copying and -1 infers one dimension") {
  Tensor x = make(iota(24), {2, 3, 4});
  Tensor v = x.view({6, 4});
  CHECK(v.shape() == Shape{6, 4});
  CHECK(v.strides() == Shape{4, 1});
  CHECK(shares_storage(v, x));
  CHECK_VALUES(v, Shape({6, 4}), iota(24), 0, 0);

  CHECK(x.view({-1, 4}).shape() == Shape{6, 4});
  CHECK(x.view({2, -1}).shape() == Shape{2, 12});
  CHECK(x.view({-1}).shape() == Shape{24});
  CHECK(x.view({1, 24, 1}).shape() == Shape{1, 24, 1});
  CHECK(x.view({4, -1, 2}).shape() == Shape{4, 3, 2});
  CHECK_THROWS_AS(x.view({5, -1}), ringgrad::Error);   // 24 is not a multiple of 5
  CHECK_THROWS_AS(x.view({-1, -1}), ringgrad::Error);  // only one dim can be inferred
  CHECK_THROWS_AS(x.view({7, 4}), ringgrad::Error);    // wrong element count
}

TEST_CASE("view of a transposed tensor fails when no strides fit and reshape copies instead") {
  Tensor x = make(iota(12), {3, 4});
  Tensor t = x.t();  // (4, 3), strides (1, 4): t[i][j] = x[j][i] = 4j + i
  CHECK_THROWS_AS(t.view({12}), ringgrad::Error);

  Tensor r = t.reshape({12});
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) expected.push_back(4 * j + i);
  CHECK_VALUES(r, Shape({12}), expected, 0, 0);
  CHECK_FALSE(shares_storage(r, x));  // it had to copy

  Tensor rv = x.reshape({2, 6});  // contiguous: a view
  CHECK(shares_storage(rv, x));
  CHECK_VALUES(rv, Shape({2, 6}), iota(12), 0, 0);
}

TEST_CASE("view splits a dimension of a transposed tensor when the strides allow it") {
  Tensor x = make(iota(24), {4, 6});
  Tensor t = x.t();              // (6, 4), strides (1, 6): t[r][c] = x[c][r] = 6c + r
  Tensor v = t.view({2, 3, 4});  // splits the stride-1 dim: strides (3, 1, 6)
  CHECK(shares_storage(v, x));
  CHECK(v.strides() == Shape{3, 1, 6});
  std::vector<double> expected;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c) expected.push_back(6 * c + 3 * a + b);
  CHECK_VALUES(v, Shape({2, 3, 4}), expected, 0, 0);
}

TEST_CASE("transpose, t and permute swap strides without moving data") {
  Tensor x = make(iota(24), {2, 3, 4});  // x[a][b][c] = 12a + 4b + c
  Tensor y = x.transpose(0, 2);          // (4, 3, 2): y[i][j][k] = x[k][j][i]
  CHECK(y.shape() == Shape{4, 3, 2});
  CHECK(y.strides() == Shape{1, 4, 12});
  CHECK(shares_storage(y, x));
  CHECK_FALSE(y.is_contiguous());
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) expected.push_back(12 * k + 4 * j + i);
  CHECK_VALUES(y, Shape({4, 3, 2}), expected, 0, 0);

  Tensor z = x.transpose(-1, -2);  // (2, 4, 3): z[a][c][b] = x[a][b][c]
  expected.clear();
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c)
      for (int b = 0; b < 3; ++b) expected.push_back(12 * a + 4 * b + c);
  CHECK_VALUES(z, Shape({2, 4, 3}), expected, 0, 0);

  Tensor p = x.permute({2, 0, 1});  // (4, 2, 3): p[c][a][b] = x[a][b][c]
  CHECK(p.strides() == Shape{1, 12, 4});
  expected.clear();
  for (int c = 0; c < 4; ++c)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 3; ++b) expected.push_back(12 * a + 4 * b + c);
  CHECK_VALUES(p, Shape({4, 2, 3}), expected, 0, 0);

  Tensor m = make(iota(12), {3, 4});
  Tensor mt = m.t();
  CHECK(mt.shape() == Shape{4, 3});
  CHECK(mt.strides() == Shape{1, 4});
  CHECK(mt.t().is_contiguous());
  CHECK_THROWS_AS(x.t(), ringgrad::Error);  // t() is for 2-D tensors
  CHECK_THROWS_AS(x.permute({0, 0, 1}), ringgrad::Error);
}

TEST_CASE("narrow, slice with a step and select pick sub-blocks that share storage") {
  Tensor x = make(iota(20), {4, 5});  // x[i][j] = 5i + j

  Tensor n = x.narrow(1, 1, 3);  // columns 1..3
  CHECK(n.shape() == Shape{4, 3});
  CHECK(n.strides() == Shape{5, 1});
  CHECK(n.offset() == 1);
  CHECK(shares_storage(n, x));
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 1; j < 4; ++j) expected.push_back(5 * i + j);
  CHECK_VALUES(n, Shape({4, 3}), expected, 0, 0);

  Tensor rows = x.slice(0, 0, 4, 2);  // rows 0 and 2
  CHECK(rows.strides() == Shape{10, 1});
  CHECK_VALUES(rows, Shape({2, 5}), (std::vector<double>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14}), 0, 0);

  Tensor cols = x.slice(1, 1, 5, 3);  // columns 1 and 4
  CHECK(cols.strides() == Shape{5, 3});
  CHECK(cols.offset() == 1);
  CHECK_VALUES(cols, Shape({4, 2}), (std::vector<double>{1, 4, 6, 9, 11, 14, 16, 19}), 0, 0);

  Tensor row2 = x.select(0, 2);
  CHECK(row2.offset() == 10);
  CHECK_VALUES(row2, Shape({5}), (std::vector<double>{10, 11, 12, 13, 14}), 0, 0);
  Tensor col3 = x.select(-1, 3);
  CHECK(col3.strides() == Shape{5});
  CHECK_VALUES(col3, Shape({4}), (std::vector<double>{3, 8, 13, 18}), 0, 0);

  // Views of views compose offsets and strides: x.t() is (5, 4); its rows 1..4 step 2 are x's columns
  // 1 and 3; selecting element 2 of each gives x[2][1], x[2][3].
  Tensor composed = x.t().slice(0, 1, 5, 2).select(1, 2);
  CHECK_VALUES(composed, Shape({2}), (std::vector<double>{11, 13}), 0, 0);
  CHECK(shares_storage(composed, x));

  CHECK_THROWS_AS(x.narrow(1, 3, 3), ringgrad::Error);  // 3 + 3 > 5
  CHECK_THROWS_AS(x.select(0, 4), ringgrad::Error);
  CHECK_THROWS_AS(x.select(2, 0), ringgrad::Error);
}

TEST_CASE("expand broadcasts with stride 0 and arithmetic broadcasts like NumPy") {
  Tensor c = make({1, 2, 3}, {3, 1});
  Tensor e = c.expand({3, 4});
  CHECK(e.shape() == Shape{3, 4});
  CHECK(e.stride(1) == 0);
  CHECK(shares_storage(e, c));
  CHECK_VALUES(e, Shape({3, 4}), (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}), 0, 0);

  Tensor r = make({1, 2, 3}, {3}).expand({2, 3});  // new leading dim
  CHECK(r.strides() == Shape{0, 1});
  CHECK_VALUES(r, Shape({2, 3}), (std::vector<double>{1, 2, 3, 1, 2, 3}), 0, 0);
  CHECK_THROWS_AS(make({1, 2, 3}, {3}).expand({4, 2}), ringgrad::Error);

  // (3, 1) + (1, 4) -> (3, 4): a[i] + b[j]
  Tensor a = make({10, 20, 30}, {3, 1});
  Tensor b = make({1, 2, 3, 4}, {1, 4});
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) expected.push_back(10.0 * (i + 1) + (j + 1));
  CHECK_VALUES(a + b, Shape({3, 4}), expected, 0, 0);

  // (2, 1, 4) * (3, 1) -> (2, 3, 4): p[a][0][c] * q[b][0]
  Tensor p = make(iota(8, 1), {2, 1, 4});
  Tensor q = make({1, -1, 2}, {3, 1});
  expected.clear();
  const double qv[3] = {1, -1, 2};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) expected.push_back((4 * i + k + 1) * qv[j]);
  CHECK_VALUES(p * q, Shape({2, 3, 4}), expected, 0, 0);
  CHECK_VALUES(q * p, Shape({2, 3, 4}), expected, 0, 0);

  // (2, 3, 4) - (4): subtract the same row from every row
  Tensor big = make(iota(24), {2, 3, 4});
  Tensor row = make({0, 1, 2, 3}, {4});
  expected.clear();
  for (int i = 0; i < 24; ++i) expected.push_back(i - i % 4);
  CHECK_VALUES(big - row, Shape({2, 3, 4}), expected, 0, 0);
}

TEST_CASE("squeeze, unsqueeze and flatten change only the shape") {
  Tensor x = make(iota(6), {1, 3, 1, 2});
  CHECK(x.squeeze().shape() == Shape{3, 2});
  CHECK(x.squeeze(0).shape() == Shape{3, 1, 2});
  CHECK(x.squeeze(-2).shape() == Shape{1, 3, 2});
  CHECK(x.unsqueeze(0).shape() == Shape{1, 1, 3, 1, 2});
  CHECK(x.unsqueeze(-1).shape() == Shape{1, 3, 1, 2, 1});
  CHECK(x.unsqueeze(2).shape() == Shape{1, 3, 1, 1, 2});
  CHECK(shares_storage(x.squeeze(), x));
  CHECK_VALUES(x.squeeze(), Shape({3, 2}), iota(6), 0, 0);

  Tensor y = make(iota(24), {2, 3, 4});
  CHECK(y.flatten().shape() == Shape{24});
  CHECK(y.flatten(1).shape() == Shape{2, 12});
  CHECK(y.flatten(0, 1).shape() == Shape{6, 4});
  CHECK(y.flatten(-2, -1).shape() == Shape{2, 12});
  CHECK(shares_storage(y.flatten(), y));
  CHECK_VALUES(y.flatten(0, 1), Shape({6, 4}), iota(24), 0, 0);

  // flatten of a non-contiguous tensor has the values in the view's row-major order
  Tensor yt = y.transpose(1, 2);  // (2, 4, 3): yt[a][c][b] = 12a + 4b + c
  std::vector<double> expected;
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c)
      for (int b = 0; b < 3; ++b) expected.push_back(12 * a + 4 * b + c);
  CHECK_VALUES(yt.flatten(), Shape({24}), expected, 0, 0);
}

TEST_CASE("contiguous returns the same tensor when already packed and a packed copy otherwise") {
  Tensor x = make(iota(12), {3, 4});
  CHECK(x.is_contiguous());
  CHECK(x.contiguous().is_same(x));

  Tensor t = x.t();
  Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.strides() == contiguous_strides(Shape{4, 3}));
  CHECK_FALSE(shares_storage(c, x));
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) expected.push_back(4 * j + i);
  CHECK_VALUES(c, Shape({4, 3}), expected, 0, 0);
  c.fill_(-1);  // the copy is independent of x
  CHECK_VALUES(x, Shape({3, 4}), iota(12), 0, 0);

  // Expanded (stride-0) tensors are not contiguous; their copy owns one element per position.
  Tensor e = make({5, 6}, {2, 1}).expand({2, 3});
  CHECK_FALSE(e.is_contiguous());
  Tensor ec = e.contiguous();
  CHECK(ec.strides() == Shape{3, 1});
  CHECK_VALUES(ec, Shape({2, 3}), (std::vector<double>{5, 5, 5, 6, 6, 6}), 0, 0);
}

TEST_CASE("writing through a view with fill_, copy_ and in-place arithmetic changes the base") {
  Tensor x = zeros({3, 4});
  double mirror[3][4] = {};

  x.select(0, 1).fill_(5);  // row 1
  for (int j = 0; j < 4; ++j) mirror[1][j] = 5;

  x.t().select(0, 0).copy_(make({1, 2, 3}, {3}));  // column 0
  for (int i = 0; i < 3; ++i) mirror[i][0] = i + 1;

  x.slice(1, 1, 4, 2).fill_(-1);  // columns 1 and 3
  for (int i = 0; i < 3; ++i) mirror[i][1] = mirror[i][3] = -1;

  // copy_ from a transposed source into a narrowed destination: x[0:2, 2] and x[0:2, 3]
  Tensor src = make({10, 20, 30, 40}, {2, 2}).t();  // src[i][j] = {10, 30; 20, 40}
  x.narrow(0, 0, 2).narrow(1, 2, 2).copy_(src);
  mirror[0][2] = 10, mirror[0][3] = 30, mirror[1][2] = 20, mirror[1][3] = 40;

  x.t().narrow(0, 0, 1).mul_(make({2, 2, 2}, {1, 3}));  // column 0 doubled
  for (int i = 0; i < 3; ++i) mirror[i][0] *= 2;

  x.select(0, 2).add_(make({1, 1, 1, 1}, {4}), 0.5);  // row 2 += 0.5
  for (int j = 0; j < 4; ++j) mirror[2][j] += 0.5;

  x.view({12}).narrow(0, 8, 4).clamp_(-0.25, 1.0);  // row 2 through a flat view
  for (int j = 0; j < 4; ++j) mirror[2][j] = std::min(1.0, std::max(-0.25, mirror[2][j]));

  std::vector<double> expected;
  for (auto& row : mirror)
    for (double v : row) expected.push_back(v);
  CHECK_VALUES(x, Shape({3, 4}), expected, 0, 0);
}

namespace {

// A (rows x cols) f32 tensor from test data, and several non-contiguous views of the same shape.
struct StridedCase {
  std::string name;
  Tensor view;
};

std::vector<StridedCase> strided_views(double lo, double hi, uint64_t seed) {
  std::vector<StridedCase> cases;
  // transposed: (6, 4) from a (4, 6)
  cases.push_back({"transposed", rgtest::random_tensor({4, 6}, seed, lo, hi).t()});
  // every other column: (6, 4) from a (6, 8)
  cases.push_back({"column step 2", rgtest::random_tensor({6, 8}, seed + 1, lo, hi).slice(1, 0, 8, 2)});
  // rows 1, 3, 5, 7, 9, 11 of a (12, 4), offset 4
  cases.push_back({"row step 2 with offset", rgtest::random_tensor({12, 4}, seed + 2, lo, hi).slice(0, 1, 12, 2)});
  // a (6, 1) expanded to (6, 4): stride 0
  cases.push_back({"expanded", rgtest::random_tensor({6, 1}, seed + 3, lo, hi).expand({6, 4})});
  // a permuted 3-D tensor narrowed and flattened back to (6, 4) needs a copy; use the permuted view
  cases.push_back(
      {"permuted then selected", rgtest::random_tensor({4, 3, 6}, seed + 4, lo, hi).permute({2, 0, 1}).select(2, 1)});
  return cases;
}

// The result on a view must equal the result on its packed copy. Both run the same math, so the
// tolerance only allows for a vectorised path rounding differently from a strided one: 4 f32 ulps.
constexpr double kSameRtol = 4.8e-7;
constexpr double kSameAtol = 1e-30;

void check_same(const Tensor& on_view, const Tensor& on_copy, const std::string& what) {
  INFO(what);
  CHECK_VALUES(on_view, on_copy.shape(), on_copy.to_vector(), kSameAtol, kSameRtol);
}

}  // namespace

TEST_CASE("every elementwise op gives the same result on a strided view as on its packed copy") {
  using Unary = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Unary>> unary = {
      {"neg", [](const Tensor& a) { return neg(a); }},
      {"exp", [](const Tensor& a) { return ringgrad::exp(a); }},
      {"log", [](const Tensor& a) { return ringgrad::log(a); }},
      {"sqrt", [](const Tensor& a) { return ringgrad::sqrt(a); }},
      {"rsqrt", [](const Tensor& a) { return rsqrt(a); }},
      {"pow 2.5", [](const Tensor& a) { return ringgrad::pow(a, 2.5); }},
      {"abs", [](const Tensor& a) { return ringgrad::abs(a); }},
      {"tanh", [](const Tensor& a) { return ringgrad::tanh(a); }},
      {"sigmoid", [](const Tensor& a) { return sigmoid(a); }},
      {"relu", [](const Tensor& a) { return relu(a - 1.2); }},
      {"gelu", [](const Tensor& a) { return gelu(a - 1.2); }},
      {"clamp", [](const Tensor& a) { return clamp(a, 0.8, 1.6); }},
      {"add scalar", [](const Tensor& a) { return a + 1.5; }},
      {"mul scalar", [](const Tensor& a) { return a * -3.0; }},
      {"scalar minus", [](const Tensor& a) { return 2.0 - a; }},
      {"to f64", [](const Tensor& a) { return a.to(DType::f64); }},
      {"to f16", [](const Tensor& a) { return a.to(DType::f16); }},
      {"clone", [](const Tensor& a) { return a.clone(); }},
  };
  using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Binary>> binary = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
      {"where", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); }},
  };

  const auto views_a = strided_views(0.5, 2.0, 100);
  const auto views_b = strided_views(0.5, 2.0, 200);
  const Tensor packed_b = rgtest::random_tensor({6, 4}, 300, 0.5, 2.0);
  const Tensor row_b = rgtest::random_tensor({4}, 301, 0.5, 2.0);
  for (size_t k = 0; k < views_a.size(); ++k) {
    const Tensor& v = views_a[k].view;
    REQUIRE(v.shape() == Shape{6, 4});
    CHECK_FALSE(v.is_contiguous());
    const Tensor vc = v.contiguous();
    for (const auto& [name, fn] : unary) check_same(fn(v), fn(vc), name + " on " + views_a[k].name);
    const Tensor& w = views_b[(k + 1) % views_b.size()].view;
    for (const auto& [name, fn] : binary) {
      const std::string where_ = name + " on " + views_a[k].name;
      check_same(fn(v, w), fn(vc, w.contiguous()), where_ + " and a strided view");
      check_same(fn(v, packed_b), fn(vc, packed_b), where_ + " and a packed tensor");
      check_same(fn(packed_b, v), fn(packed_b, vc), "packed and " + where_);
      check_same(fn(v, row_b), fn(vc, row_b), where_ + " and a broadcast row");
    }
  }
}

TEST_CASE("reductions give the same result on a strided view as on its packed copy") {
  for (const auto& [name, v] : strided_views(-2.0, 2.0, 400)) {
    const Tensor vc = v.contiguous();
    check_same(v.sum(), vc.sum(), "sum all on " + name);
    check_same(v.sum({0}), vc.sum({0}), "sum dim 0 on " + name);
    check_same(v.sum({1}, true), vc.sum({1}, true), "sum dim 1 keepdim on " + name);
    check_same(v.mean({1}), vc.mean({1}), "mean dim 1 on " + name);
    check_same(v.var({0}), vc.var({0}), "var dim 0 on " + name);
    check_same(v.var({}, false, false), vc.var({}, false, false), "biased var all on " + name);
    check_same(v.max(0), vc.max(0), "max dim 0 on " + name);
    check_same(v.max(1, true), vc.max(1, true), "max dim 1 keepdim on " + name);
    check_same(v.argmax(0), vc.argmax(0), "argmax dim 0 on " + name);
    if (name != "expanded") {  // an expanded row is all ties along dim 1; tie-breaking is not the point
      check_same(v.argmax(1), vc.argmax(1), "argmax dim 1 on " + name);
    }
    check_same(sum_to(v, {1, 4}), sum_to(vc, {1, 4}), "sum_to (1, 4) on " + name);
    check_same(sum_to(v, {6, 1}), sum_to(vc, {6, 1}), "sum_to (6, 1) on " + name);
    check_same(v.softmax(1), vc.softmax(1), "softmax dim 1 on " + name);
    check_same(v.log_softmax(0), vc.log_softmax(0), "log_softmax dim 0 on " + name);
  }
}

TEST_CASE("matmul, mm, bmm and linear accept transposed and sliced operands") {
  // GEMM may block the sum differently for transposed operands; allow f32 rounding of a K=4..8 sum.
  const double rtol = 1e-5, atol = 1e-6;
  auto same = [&](const Tensor& got, const Tensor& want, const std::string& what) {
    INFO(what);
    CHECK_VALUES(got, want.shape(), want.to_vector(), atol, rtol);
  };
  const Tensor a_t = rgtest::random_tensor({4, 5}, 1).t();                // (5, 4) transposed
  const Tensor a_s = rgtest::random_tensor({5, 8}, 2).slice(1, 0, 8, 2);  // (5, 4) column step 2
  const Tensor b_t = rgtest::random_tensor({3, 4}, 3).t();                // (4, 3) transposed
  const Tensor b_s = rgtest::random_tensor({8, 3}, 4).slice(0, 1, 8, 2);  // (4, 3) row step 2
  for (const Tensor& a : {a_t, a_s})
    for (const Tensor& b : {b_t, b_s}) {
      same(mm(a, b), mm(a.contiguous(), b.contiguous()), "mm");
      same(matmul(a, b), mm(a.contiguous(), b.contiguous()), "matmul 2-D");
    }

  const Tensor x = rgtest::random_tensor({3, 4, 2}, 5).permute({0, 2, 1});  // (3, 2, 4)
  const Tensor y = rgtest::random_tensor({3, 5, 4}, 6).transpose(1, 2);     // (3, 4, 5)
  same(bmm(x, y), bmm(x.contiguous(), y.contiguous()), "bmm");
  same(matmul(x, y), bmm(x.contiguous(), y.contiguous()), "matmul batched");
  same(matmul(x, b_s.narrow(1, 0, 2)), matmul(x.contiguous(), b_s.narrow(1, 0, 2).contiguous()),
       "matmul batched with a 2-D strided rhs");

  const Tensor w = rgtest::random_tensor({4, 3}, 7).t();                // (3, 4) weight, transposed storage
  const Tensor bias = rgtest::random_tensor({6}, 8).slice(0, 0, 6, 2);  // (3), stride 2
  same(linear(a_s, w, bias), linear(a_s.contiguous(), w.contiguous(), bias.contiguous()), "linear");

  const Tensor u = rgtest::random_tensor({8}, 9).slice(0, 0, 8, 2);
  const Tensor v = rgtest::random_tensor({4, 2}, 10).select(1, 1);
  same(matmul(u, v), matmul(u.contiguous(), v.contiguous()), "dot of strided vectors");
}

TEST_CASE("shape helpers, wrap_dim and make_view describe strided layouts") {
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({2, 0, 3}) == 0);
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK(shape_str({32, 784}) == "(32, 784)");
  CHECK(contiguous_strides({2, 3, 4}) == Shape{12, 4, 1});
  CHECK(wrap_dim(-1, 3, "test") == 2);
  CHECK(wrap_dim(0, 3, "test") == 0);
  CHECK_THROWS_AS(wrap_dim(3, 3, "test"), ringgrad::Error);
  CHECK_THROWS_AS(wrap_dim(-4, 3, "test"), ringgrad::Error);

  Tensor x = make(iota(12), {3, 4});
  CHECK(x.size(-1) == 4);
  CHECK(x.stride(0) == 4);
  CHECK(x.element_size() == 4);
  CHECK(x.nbytes() == 48);
  CHECK(x.desc() == "(3, 4) f32 cpu");
  // A hand-made view: a (2, 2) window starting at element 5 with column stride 4 -> x[1][1], x[2][1], ...
  Tensor v = make_view(x.storage(), {2, 2}, {1, 4}, 5, DType::f32);
  CHECK_VALUES(v, Shape({2, 2}), (std::vector<double>{5, 9, 6, 10}), 0, 0);
  CHECK(v.raw_data() == static_cast<char*>(x.raw_data()) + 5 * 4);
}

TEST_CASE("clone copies into new storage and to(cpu) returns self") {
  Tensor x = make(iota(6), {2, 3});
  Tensor c = x.t().clone();
  CHECK_FALSE(shares_storage(c, x));
  CHECK_VALUES(c, Shape({3, 2}), (std::vector<double>{0, 3, 1, 4, 2, 5}), 0, 0);
  c.fill_(7);
  CHECK_VALUES(x, Shape({2, 3}), iota(6), 0, 0);
  CHECK(x.to(Device::cpu()).is_same(x));
  CHECK(x.device() == Device::cpu());
}

TEST_CASE("move_into: every handle of the tensor then lives in the new place, with its gradient and identity") {
  Tensor p = make(iota(6), {2, 3});
  p.requires_grad_();
  Tensor handle = p;  // another handle of the same tensor, as a module's registry holds one
  Tensor old_view = p.detach().view({-1});
  Tensor arena = make(std::vector<double>(10, -1.0), {10});
  p.move_into(arena.narrow(0, 2, 6).view({2, 3}));
  CHECK(shares_storage(handle, arena));
  CHECK(handle.is_same(p));
  CHECK(p.requires_grad());
  CHECK_VALUES(arena, Shape({10}), (std::vector<double>{-1, -1, 0, 1, 2, 3, 4, 5, -1, -1}), 0, 0);
  // Writes through the parameter land in the arena; a view taken before keeps the old elements.
  {
    NoGradGuard no_grad;
    p.add_(10.0);
  }
  CHECK_VALUES(arena, Shape({10}), (std::vector<double>{-1, -1, 10, 11, 12, 13, 14, 15, -1, -1}), 0, 0);
  CHECK_VALUES(old_view, Shape({6}), iota(6), 0, 0);
  // Autograd still treats it as the same leaf: the gradient of sum(p * p) is 2p.
  (p * p).sum().backward();
  CHECK_VALUES(handle.grad(), Shape({2, 3}), (std::vector<double>{20, 22, 24, 26, 28, 30}), 0, 0);
  // The place must match: shape, dtype, device.
  CHECK_THROWS_WITH_AS(p.move_into(arena.narrow(0, 0, 5)), doctest::Contains("move_into"), Error);
  CHECK_THROWS_WITH_AS(p.move_into(zeros({2, 3}, {.dtype = DType::f64})), doctest::Contains("must have the shape"),
                       Error);
}

TEST_CASE("0-dim tensors broadcast against any shape") {
  const Tensor s = scalar_tensor(2.0);
  CHECK(s.dim() == 0);
  CHECK(s.shape() == Shape{});
  CHECK_VALUES(s * make(iota(6), {2, 3}), Shape({2, 3}), (std::vector<double>{0, 2, 4, 6, 8, 10}), 0, 0);
  CHECK_VALUES(make(iota(3), {3}) - s, Shape({3}), (std::vector<double>{-2, -1, 0}), 0, 0);
  CHECK_VALUES(s.expand({2, 2}), Shape({2, 2}), (std::vector<double>{2, 2, 2, 2}), 0, 0);
  CHECK(s.view({1, 1}).shape() == Shape{1, 1});
  CHECK(make({5}, {1, 1}).view({}).dim() == 0);
}
