// conv2d and max_pool2d: values against direct loops written here, gradients against finite
// differences (gradcheck, in double).
#include <doctest/doctest.h>

#include <cmath>

#include "../core/test_util.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

// out[n][o][i][j] = b[o] + sum_{c,a,e} x[n][c][i*s-p+a][j*s-p+e] w[o][c][a][e]  (zero outside x)
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p,
                                   Shape& out_shape) {
  const auto xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), K = w.size(2);
  const int64_t OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
  out_shape = {N, O, OH, OW};
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bv[o];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t a = 0; a < K; ++a)
              for (int64_t e = 0; e < K; ++e) {
                const int64_t y = i * s - p + a, xx = j * s - p + e;
                if (y < 0 || y >= H || xx < 0 || xx >= W) continue;
                acc += xv[((n * C + c) * H + y) * W + xx] * wv[((o * C + c) * K + a) * K + e];
              }
          out.push_back(acc);
        }
  return out;
}

// conv2d(x, w, b, s, p), its values checked against conv_reference.
Tensor conv2d_checked(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p) {
  Shape shape;
  const auto expected = conv_reference(x, w, b, s, p, shape);
  Tensor y = conv2d(x, w, b, s, p);
  REQUIRE(y.shape() == shape);
  const auto got = y.to_vector();
  // f32 sums of up to 45 products of values of size ~1: 1e-4 absolute is ~100 f32 ulps of the
  // largest terms.
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-4).scale(1));
  return y;
}

}  // namespace

TEST_CASE("conv2d matches a direct loop for several strides and paddings") {
  Generator gen(4);
  Tensor x = randn({2, 3, 7, 6}, gen), w = randn({4, 3, 3, 3}, gen), b = randn({4}, gen);
  for (auto [s, p] : {std::pair<int64_t, int64_t>{1, 0}, {1, 1}, {2, 1}, {3, 2}}) {
    conv2d_checked(x, w, b, s, p);
  }
}

TEST_CASE("conv2d gradients match finite differences, with and without bias, strided input") {
  Generator gen(5);
  Tensor x = randn({2, 3, 5, 6}, gen), w = randn({4, 3, 3, 3}, gen), b = randn({4}, gen);
  auto r = gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 1, 1); }, {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), 2, 0); }, {x, w});
  CHECK_MESSAGE(r.ok, r.message);
  // A non-contiguous input (transposed spatial dims).
  r = gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], 2, 1); }, {x.transpose(2, 3), w, b});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("max_pool2d picks window maxima and routes gradients to them") {
  Tensor x = from_vector(std::vector<double>{1, 5, 2, 0,  //
                                             3, 4, 8, 1,  //
                                             0, 0, 1, 2,  //
                                             9, 0, 3, 7},
                         {1, 1, 4, 4}, {.requires_grad = true});
  Tensor y = max_pool2d(x, 2);
  CHECK(y.to_vector() == std::vector<double>{5, 8, 9, 7});
  y.sum().backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1});
  Generator gen(6);
  // Distinct values (a random permutation scaled) keep the argmax away from ties.
  Tensor v = randn({2, 3, 6, 5}, gen);
  auto r = gradcheck([](const std::vector<Tensor>& t) { return max_pool2d(t[0], 2); }, {v});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck([](const std::vector<Tensor>& t) { return max_pool2d(t[0], 3, 2, 1); }, {v});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("max_pool2d: ties go to the first maximum, NaN wins (2x2 fast path and the general loop)") {
  const double nan = std::nan("");
  // Window 1: all equal -> the first (top-left) gets the gradient. Window 2: NaN in it -> NaN.
  Tensor x = from_vector(std::vector<double>{2, 2, 1, nan,  //
                                             2, 2, 0, 3},
                         {1, 1, 2, 4}, {.requires_grad = true});
  for (int64_t padding : {0, 1}) {  // padding 1 (kernel 2, stride 2) takes the general loop
    Tensor y = max_pool2d(x, 2, 2, padding);
    std::vector<double> v = y.to_vector();
    if (padding == 0) {
      REQUIRE(v.size() == 2);
      CHECK(v[0] == 2);
      CHECK(std::isnan(v[1]));
      x.zero_grad();
      y.backward(ones_like(y));
      CHECK(x.grad().to_vector()[0] == 1);  // the first of four equal values
      CHECK(x.grad().to_vector()[3] == 1);  // the NaN's position
    } else {
      REQUIRE(v.size() == 6);  // (2 + 2 - 2) / 2 + 1 = 2 rows of (4 + 2 - 2) / 2 + 1 = 3
      CHECK(std::isnan(v[2]));
    }
  }
}

TEST_CASE("conv2d in f32 on every ISA: values against a double loop, gradients against the f64 computation") {
  // Widths past one AVX-512 tile (32) and row counts that are not multiples of 6, so that full and
  // edge tiles of both GEMM paths run; the f64 computation (OpenBLAS's dgemm) is gradchecked above.
  const Shape xs{3, 5, 14, 40}, ws{7, 5, 3, 3};
  const auto xv = rgtest::random_values(3 * 5 * 14 * 40, 21), wv = rgtest::random_values(7 * 5 * 3 * 3, 22);
  const auto bv = rgtest::random_values(7, 23);
  for (ringgrad::CpuIsa isa : rgtest::isas_to_test("conv2d")) {
    rgtest::IsaScope scope(isa);
    for (auto [s, p] : {std::pair<int64_t, int64_t>{1, 1}, {2, 0}}) {
      const std::string isa_name = cpu_isa_name(isa);
      const int64_t stride = s;  // INFO / CAPTURE cannot name a structured binding (clang 14)
      CAPTURE(isa_name);
      CAPTURE(stride);
      Tensor x = from_vector(xv, xs, {.dtype = DType::f32, .requires_grad = true});
      Tensor w = from_vector(wv, ws, {.dtype = DType::f32, .requires_grad = true});
      Tensor b = from_vector(bv, {7}, {.dtype = DType::f32, .requires_grad = true});
      Tensor y = conv2d_checked(x, w, b, s, p);
      const Tensor r = from_vector(rgtest::random_values(y.numel(), 24), y.shape(), {.dtype = DType::f32});
      (y * r).sum().backward();
      const TensorOptions f64{.dtype = DType::f64, .requires_grad = true};
      Tensor x64 = from_vector(xv, xs, f64), w64 = from_vector(wv, ws, f64), b64 = from_vector(bv, {7}, f64);
      (conv2d(x64, w64, b64, s, p) * r.to(DType::f64)).sum().backward();
      for (auto [g, g64] : {std::pair{x.grad(), x64.grad()}, {w.grad(), w64.grad()}, {b.grad(), b64.grad()}}) {
        const auto a = g.to_vector(), e = g64.to_vector();
        REQUIRE(a.size() == e.size());
        // dw sums up to 3 * 196 * 9 products of values in [-1, 1]: 1e-3 absolute is far below one term.
        for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(e[i]).epsilon(1e-4).scale(10));
      }
    }
  }
}

TEST_CASE("max_pool2d 2x2 in f32 on every ISA: ties, NaN and gradient routing against a loop here") {
  // Rows 70 wide (35 outputs: two 16-wide vector blocks and a masked tail of 3), W2's 28 and 14
  // (14 and 7 outputs: one masked block), and 15 (7 outputs, the last column unused); values from
  // {0, 1, 2, 3} so that most windows hold ties, and a NaN in some windows.
  for (const int64_t W : {70, 28, 14, 15}) {
    CAPTURE(W);
    const int64_t N = 2, C = 3, H = 6, OH = 3, OW = W / 2;
    rgtest::TestRng rng(31 + static_cast<uint64_t>(W));
    std::vector<double> xv(N * C * H * W);
    for (double& v : xv) v = (rng.next() % 23 == 0) ? std::nan("") : std::floor(rng.uniform(0, 4));
    // The rule: scan the window (0,0) (0,1) (1,0) (1,1); a value replaces the best when greater, or NaN.
    std::vector<double> ref_y;
    std::vector<int64_t> ref_at;  // flat index into x
    for (int64_t plane = 0; plane < N * C; ++plane)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          int64_t best = plane * H * W + 2 * i * W + 2 * j;
          for (int64_t at : {best + 1, best + W, best + W + 1})
            if (xv[at] > xv[best] || std::isnan(xv[at])) best = at;
          ref_y.push_back(xv[best]);
          ref_at.push_back(best);
        }
    const auto gv = rgtest::random_values(ref_y.size(), 32, 1.0, 2.0);
    for (ringgrad::CpuIsa isa : rgtest::isas_to_test("max_pool2d")) {
      rgtest::IsaScope scope(isa);
      const std::string isa_name = cpu_isa_name(isa);
      CAPTURE(isa_name);
      Tensor x = from_vector(xv, {N, C, H, W}, {.dtype = DType::f32, .requires_grad = true});
      Tensor y = max_pool2d(x, 2);
      const auto got = y.to_vector();
      REQUIRE(got.size() == ref_y.size());
      for (size_t i = 0; i < got.size(); ++i)
        CHECK((got[i] == ref_y[i] || (std::isnan(got[i]) && std::isnan(ref_y[i]))));
      y.backward(from_vector(gv, y.shape(), {.dtype = DType::f32}));
      std::vector<double> expected_grad(xv.size(), 0.0);
      for (size_t o = 0; o < ref_at.size(); ++o) expected_grad[ref_at[o]] = static_cast<float>(gv[o]);
      CHECK(x.grad().to_vector() == expected_grad);
    }
  }
}

TEST_CASE("conv2d and max_pool2d reject bad shapes with clear messages") {
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 5, 5}), zeros({2, 4, 3, 3})), doctest::Contains("input channels differ"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(zeros({1, 3, 2, 2}), zeros({2, 3, 3, 3})), doctest::Contains("larger than the padded"),
                       Error);
  CHECK_THROWS_WITH_AS(max_pool2d(zeros({3, 4}), 2), doctest::Contains("[max_pool2d]"), Error);
}
