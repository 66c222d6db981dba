// embedding, layer_norm, causal_softmax and causal self-attention: forward against naive
// double-precision computations written here, backward against finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../core/test_util.h"
#include "ringgrad.h"

using namespace ringgrad;

namespace {

// Elementwise |a - b| <= tol, as doubles.
bool near(const Tensor& a, const std::vector<double>& b, double tol) {
  const std::vector<double> v = a.to_vector();
  if (v.size() != b.size()) return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (!(std::abs(v[i] - b[i]) <= tol)) return false;
  return true;
}

}  // namespace

TEST_CASE("layer_norm: forward against the definition, f32 and f64, with and without affine") {
  Generator gen(1);
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = randn({3, 4, 5}, gen, {.dtype = dt}) * 3.0 + 1.0;
    Tensor w = randn({5}, gen, {.dtype = dt}), b = randn({5}, gen, {.dtype = dt});
    const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    std::vector<double> expected_affine, expected_plain;
    for (int r = 0; r < 12; ++r) {
      double mean = 0, var = 0;
      for (int c = 0; c < 5; ++c) mean += xv[r * 5 + c] / 5;
      for (int c = 0; c < 5; ++c) var += (xv[r * 5 + c] - mean) * (xv[r * 5 + c] - mean) / 5;
      for (int c = 0; c < 5; ++c) {
        const double xhat = (xv[r * 5 + c] - mean) / std::sqrt(var + 1e-5);
        expected_plain.push_back(xhat);
        expected_affine.push_back(xhat * wv[c] + bv[c]);
      }
    }
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    CHECK(near(layer_norm(x, w, b), expected_affine, tol));
    CHECK(near(layer_norm(x), expected_plain, tol));
    CHECK(layer_norm(x).dtype() == dt);
  }
}

TEST_CASE("layer_norm: gradients match finite differences (x, weight, bias; strided x)") {
  Generator gen(2);
  Tensor x = randn({4, 6}, gen, {.dtype = DType::f64}), w = randn({6}, gen, {.dtype = DType::f64}),
         b = randn({6}, gen, {.dtype = DType::f64});
  auto r = gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], v[1], v[2]); }, {x, w, b});
  CHECK_MESSAGE(r.ok, r.message);
  r = gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  Tensor xt = randn({6, 4}, gen, {.dtype = DType::f64}).t();  // (4, 6), not contiguous
  r = gradcheck([](const std::vector<Tensor>& v) { return layer_norm(v[0], v[1], Tensor()); }, {xt, w});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("layer_norm: bad shapes name the op and the shapes") {
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 5}), zeros({4})),
                       doctest::Contains("[layer_norm] weight and bias must be (5,) f32"), Error);
}

TEST_CASE("causal_softmax: forward against scale, mask and softmax written out; gradients") {
  Generator gen(3);
  Tensor s = randn({2, 4, 4}, gen, {.dtype = DType::f64});
  const double scale = 0.7;
  const std::vector<double> sv = s.to_vector();
  std::vector<double> expected;
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 4; ++i) {
      double sum = 0;
      for (int j = 0; j <= i; ++j) sum += std::exp(scale * sv[(m * 4 + i) * 4 + j]);
      for (int j = 0; j < 4; ++j) expected.push_back(j <= i ? std::exp(scale * sv[(m * 4 + i) * 4 + j]) / sum : 0.0);
    }
  CHECK(near(causal_softmax(s, scale), expected, 1e-12));
  auto r = gradcheck([&](const std::vector<Tensor>& v) { return causal_softmax(v[0], scale); }, {s});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_AS(causal_softmax(zeros({3, 4}), 1.0), doctest::Contains("(..., T, T)"), Error);
}

TEST_CASE("embedding: rows of the table, scatter-add gradient for repeated tokens, range errors") {
  Generator gen(4);
  Tensor w = randn({5, 3}, gen, {.dtype = DType::f64});
  Tensor idx = from_vector(std::vector<int64_t>{4, 0, 4, 2}, {2, 2}, {.dtype = DType::i64});
  Tensor out = embedding(w, idx);
  CHECK(out.shape() == Shape{2, 2, 3});
  const std::vector<double> wv = w.to_vector(), ov = out.to_vector();
  const int64_t rows[] = {4, 0, 4, 2};
  for (int k = 0; k < 4; ++k)
    for (int c = 0; c < 3; ++c) CHECK(ov[k * 3 + c] == wv[rows[k] * 3 + c]);
  auto r = gradcheck([&](const std::vector<Tensor>& v) { return embedding(v[0], idx); }, {w});
  CHECK_MESSAGE(r.ok, r.message);
  // Token 4 appears twice: its row's gradient is the sum of both positions' (here 1 + 1).
  Tensor wg = w.detach().requires_grad_(true);
  embedding(wg, idx).sum().backward();
  CHECK(wg.grad().to_vector() == std::vector<double>{1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 2, 2, 2});
  CHECK_THROWS_AS(embedding(w, from_vector(std::vector<int64_t>{5}, {1}, {.dtype = DType::i64})), Error);
}

TEST_CASE("causal self-attention: forward against explicit loops; gradients for q, k, v") {
  Generator gen(6);
  const int64_t B = 1, H = 2, T = 4, D = 3;
  Tensor q = randn({B, H, T, D}, gen, {.dtype = DType::f64}), k = randn({B, H, T, D}, gen, {.dtype = DType::f64}),
         v = randn({B, H, T, D}, gen, {.dtype = DType::f64});
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector();
  std::vector<double> expected;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i) {
      std::vector<double> p(T, 0.0);
      double sum = 0, max = -std::numeric_limits<double>::infinity();
      for (int j = 0; j <= i; ++j) {
        for (int d = 0; d < D; ++d) p[j] += qv[(h * T + i) * D + d] * kv[(h * T + j) * D + d];
        p[j] /= std::sqrt(static_cast<double>(D));
        max = std::max(max, p[j]);
      }
      for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - max));
      for (int d = 0; d < D; ++d) {
        double y = 0;
        for (int j = 0; j <= i; ++j) y += p[j] / sum * vv[(h * T + j) * D + d];
        expected.push_back(y);
      }
    }
  CHECK(near(causal_self_attention(q, k, v), expected, 1e-12));
  auto r = gradcheck([](const std::vector<Tensor>& x) { return causal_self_attention(x[0], x[1], x[2]); }, {q, k, v});
  CHECK_MESSAGE(r.ok, r.message);
}

// The packed form reads q, k, v out of one (B, T, 3C) projection in place. Reference: the (q, k, v)
// form above (itself checked against loops), fed the same numbers split and transposed by hand.
TEST_CASE("causal self-attention from packed qkv: equals the (q, k, v) form; gradients; f32 and errors") {
  Generator gen(7);
  const int64_t B = 2, T = 5, H = 3, D = 2, C = H * D;
  Tensor qkv = randn({B, T, 3 * C}, gen, {.dtype = DType::f64});
  auto split = [&](const Tensor& t, int64_t part) {  // (B, T, 3C) -> (B, H, T, D)
    return t.narrow(2, part * C, C).reshape({B, T, H, D}).transpose(1, 2).contiguous();
  };
  Tensor expected = causal_self_attention(split(qkv, 0), split(qkv, 1), split(qkv, 2))  // (B, H, T, D)
                        .transpose(1, 2)
                        .contiguous()
                        .reshape({B, T, C});
  Tensor y = causal_self_attention(qkv, H);
  REQUIRE(y.shape() == Shape{B, T, C});
  CHECK(near(y, expected.to_vector(), 1e-12));

  auto r = gradcheck([&](const std::vector<Tensor>& x) { return causal_self_attention(x[0], H); }, {qkv});
  CHECK_MESSAGE(r.ok, r.message);

  // f32 (BLAS sgemm per head, vectorised exp) against the f64 result.
  Tensor y32 = causal_self_attention(qkv.to(DType::f32), H);
  CHECK(y32.dtype() == DType::f32);
  CHECK(near(y32, expected.to_vector(), 1e-5));

  // Longer than the kernel's causal block (32 queries), with a partial last block (70 = 32 + 32 + 6),
  // over the thread pool: f64 forward and gradient against the (q, k, v) form's, f32 close to them.
  const int64_t T2 = 70;
  Tensor big = randn({3, T2, 3 * 32}, gen, {.dtype = DType::f64}).requires_grad_(true);
  Tensor gy = randn({3, T2, 32}, gen, {.dtype = DType::f64});
  Tensor big_y = causal_self_attention(big, 4);
  (big_y * gy).sum().backward();
  Tensor packed_grad = big.grad().clone();
  Tensor leaf = big.detach().requires_grad_(true);
  auto heads = [&](int64_t part) { return leaf.narrow(2, part * 32, 32).reshape({3, T2, 4, 8}).transpose(1, 2); };
  Tensor ref_y = causal_self_attention(heads(0), heads(1), heads(2)).transpose(1, 2).reshape({3, T2, 32});
  (ref_y * gy).sum().backward();
  CHECK(near(big_y, ref_y.to_vector(), 1e-12));
  CHECK(near(packed_grad, leaf.grad().to_vector(), 1e-12));
  Tensor big32 = big.detach().to(DType::f32).requires_grad_(true);
  (causal_self_attention(big32, 4) * gy.to(DType::f32)).sum().backward();
  CHECK(near(big32.grad(), leaf.grad().to_vector(), 1e-4));
  // gradcheck across block boundaries (T 40: blocks of 32 and 8), small width to keep it quick.
  Tensor two_blocks = randn({1, 40, 3 * 4}, gen, {.dtype = DType::f64});
  r = gradcheck([&](const std::vector<Tensor>& x) { return causal_self_attention(x[0], 2); }, {two_blocks});
  CHECK_MESSAGE(r.ok, r.message);

  CHECK_THROWS_WITH_AS(causal_self_attention(randn({2, 5, 10}, gen), 3), doctest::Contains("C divisible by n_head"),
                       Error);
}

// With v = the identity (D = T, v row j = e_j), y row i IS row i of the (dropped) probabilities, so
// the mask can be checked entry by entry against the dropout-free run.
TEST_CASE("causal self-attention dropout: kept entries scaled by 1/(1-p), seeded, gradients") {
  const int64_t B = 2, T = 8, H = 2, D = 8, C = H * D;
  Generator init(9);
  Tensor qkv = randn({B, T, 3 * C}, init, {.dtype = DType::f64});
  std::vector<double> values = qkv.to_vector();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) values[static_cast<size_t>((b * T + j) * 3 * C + 2 * C + h * D + d)] = d == j;
  qkv = from_vector(values, {B, T, 3 * C}, {.dtype = DType::f64});

  const std::vector<double> p = causal_self_attention(qkv, H).to_vector();  // y[b, i, h D + j] = p[b, h, i, j]
  Generator gen(11);
  const std::vector<double> dropped = causal_self_attention(qkv, H, 0.5, gen).to_vector();
  int visible = 0, zeros = 0;
  for (size_t e = 0; e < p.size(); ++e) {
    const int64_t i = static_cast<int64_t>(e / C) % T, j = static_cast<int64_t>(e % C) % D;
    if (j > i) {
      CHECK(dropped[e] == 0);  // masked by causality either way
      continue;
    }
    ++visible;
    if (dropped[e] == 0) ++zeros;
    else CHECK(std::abs(dropped[e] - 2 * p[e]) <= 1e-12);
  }
  CHECK(visible == B * H * T * (T + 1) / 2);
  CHECK(zeros > visible * 3 / 10);
  CHECK(zeros < visible * 7 / 10);

  Generator same(11);
  CHECK(causal_self_attention(qkv, H, 0.5, same).to_vector() == dropped);  // same seed, same mask
  CHECK(causal_self_attention(qkv, H, 0.5, same).to_vector() != dropped);  // the generator moved on
  CHECK(causal_self_attention(qkv, H, 0.0, same).to_vector() == p);        // rate 0: no dropout

  // The backward recomputes the same mask (a fresh generator per call keeps fn deterministic).
  Generator g0(3);
  Tensor x = randn({1, 6, 3 * 4}, g0, {.dtype = DType::f64});
  auto r = gradcheck(
      [](const std::vector<Tensor>& v) {
        Generator g(21);
        return causal_self_attention(v[0], 2, 0.3, g);
      },
      {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_AS(causal_self_attention(x, 2, 1.0, g0), doctest::Contains("dropout must be in [0, 1)"), Error);
}

TEST_CASE("causal self-attention in f32: the AVX-512 softmax rows give the AVX2 rows' values bit for bit") {
  // 70 queries (row blocks 32, 32, 6), 2 heads of 40 (rows of keys past a 16-lane group), with and
  // without attention dropout; forward output and the gradient of the packed projection. The plain
  // kernels: the fused one (AVX-512 only) is compared with them in test_fused_attention.cpp.
  rgtest::FusionScope plain(false);
  const int64_t B = 2, T = 70, H = 2, C = 80;
  Generator data(11);
  const Tensor qkv = randn({B, T, 3 * C}, data), g = randn({B, T, C}, data);
  for (const double dropout : {0.0, 0.2}) {
    CAPTURE(dropout);
    std::vector<std::vector<double>> outputs, grads;
    for (const CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
      if (!cpu_supports(isa)) {
        MESSAGE("skipped on this CPU: ", cpu_isa_name(isa));
        continue;
      }
      const CpuIsa before = cpu_isa();
      set_cpu_isa(isa);
      Tensor leaf = qkv.detach().requires_grad_(true);
      Generator gen(3);  // the same dropout mask on both paths
      Tensor y = dropout > 0 ? causal_self_attention(leaf, H, dropout, gen) : causal_self_attention(leaf, H);
      y.backward(g);
      outputs.push_back(y.to_vector());
      grads.push_back(leaf.grad().to_vector());
      set_cpu_isa(before);
    }
    for (size_t k = 1; k < outputs.size(); ++k) {
      CHECK(outputs[k] == outputs[0]);
      CHECK(grads[k] == grads[0]);
    }
  }
}
