// ringgrad's own f32 GEMM (core/cpu/tiled_sgemm.cpp) against a triple loop in double precision.
//
// The shapes cross every blocking edge of the kernel: m around the 6-row tile and the 120-row A
// block, n around the 16-column sliver and the 384-column B panel, k around the 384-deep panel (so C
// is revisited), with all four transpose combinations, row strides wider than the matrices, and
// alpha / beta including beta = 0 over a C full of NaN (BLAS: C is not read).
//
// Tolerance: f32 accumulation of k products (entries in [-1, 1]) plus the alpha / beta step errs by
// at most (k + 2)·u·|alpha|·Σ|a·b| (u = 2^-24 ~ 6e-8), so |got - want| <= 1.2e-7·(k + 2)·|alpha|·Σ|a·b|
// + 1e-6 accepts any rounding order; a wrong row, column, panel or scaling is far outside it (for
// short k a single missing term is too).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "../core/test_util.h"
#include "core/cpu/tiled_sgemm.h"
#include "core/cpu_isa.h"
#include "core/kernels.h"

namespace {

using rgtest::TestRng;

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t pad;  // extra columns in every stored row (lda, ldb, ldc wider than the matrices)
  float alpha, beta;
};

// Runs one product through `gemm` and compares every element of C, including the padding columns,
// which must keep their values.
template <class Gemm>
void check(const Case& c, Gemm gemm) {
  TestRng rng(static_cast<uint64_t>(c.m * 1000003 + c.n * 1009 + c.k * 7 + c.trans_a * 2 + c.trans_b));
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  std::vector<float> a(static_cast<size_t>(a_rows * lda)), b(static_cast<size_t>(b_rows * ldb));
  std::vector<float> out(static_cast<size_t>(c.m * ldc));
  for (float& x : a) x = static_cast<float>(rng.uniform(-1, 1));
  for (float& x : b) x = static_cast<float>(rng.uniform(-1, 1));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float& x : out) x = c.beta == 0.0f ? nan : static_cast<float>(rng.uniform(-1, 1));
  const std::vector<float> before = out;
  auto A = [&](int64_t i, int64_t p) { return double(c.trans_a ? a[p * lda + i] : a[i * lda + p]); };
  auto B = [&](int64_t p, int64_t j) { return double(c.trans_b ? b[j * ldb + p] : b[p * ldb + j]); };

  gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(), ldc);

  int64_t wrong = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = out[i * ldc + j];
      if (j >= c.n) {  // padding: untouched (NaN stays NaN)
        const float was = before[i * ldc + j];
        if (!(got == was || (std::isnan(got) && std::isnan(was)))) ++wrong;
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        sum += A(i, p) * B(p, j);
        magnitude += std::fabs(A(i, p) * B(p, j));
      }
      double want = c.alpha * sum;
      if (c.beta != 0.0f) want += double(c.beta) * before[i * ldc + j];
      const double tol = 1.2e-7 * double(c.k + 2) * std::fabs(c.alpha) * magnitude + 1e-6;
      if (!(std::fabs(got - want) <= tol)) {
        if (wrong < 3)
          MESSAGE("C(" << i << ", " << j << ") = " << got << ", want " << want << " (m " << c.m << " n " << c.n << " k "
                       << c.k << " ta " << c.trans_a << " tb " << c.trans_b << " beta " << c.beta << ")");
        ++wrong;
      }
    }
  }
  CHECK(wrong == 0);
}

std::vector<Case> edge_cases() {
  std::vector<Case> cases;
  const int64_t ms[] = {1, 5, 6, 7, 121, 245};
  const int64_t ns[] = {1, 15, 16, 17, 127, 128, 390, 400};  // 127 / 128: the packed-A threshold
  const int64_t ks[] = {1, 32, 384, 385, 800};
  int i = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : ks) {
            ++i;
            if (i % 3 != 0 && !(m == 245 && n >= 390)) continue;  // a third of the grid, and every largest case
            // beta, padding and alpha from independent counters, so every combination occurs (beta = 0
            // with NaN in padded C included)
            const int j = i / 3;
            const float beta = (j % 3 == 0) ? 0.0f : (j % 3 == 1) ? 1.0f : 0.5f;
            const int64_t pad = (j / 3) % 2 == 0 ? 0 : 3;
            const float alpha = (j / 6) % 2 == 0 ? 1.0f : -1.5f;
            cases.push_back({ta, tb, m, n, k, pad, alpha, beta});
          }
  return cases;
}

}  // namespace

TEST_CASE("tiled_sgemm matches a double-precision triple loop across every blocking edge, on every ISA") {
  if (!ringgrad::cpu::tiled_sgemm_available()) {
    MESSAGE("this build has no AVX2 + FMA: tiled_sgemm is not compiled in");
    return;
  }
  for (ringgrad::CpuIsa isa : rgtest::isas_to_test("tiled_sgemm")) {
    CAPTURE(ringgrad::cpu_isa_name(isa));
    rgtest::IsaScope scope(isa);
    for (const Case& c : edge_cases()) check(c, ringgrad::cpu::tiled_sgemm);
  }
}

TEST_CASE("tiled_sgemm's AVX2 and AVX-512 paths give bit-identical products") {
  // Each element of C is the same chain of FMAs in the same order on both paths; only the tile
  // width differs (16 vs 32 columns), so the shapes cross both widths' edges.
  if (!ringgrad::cpu::tiled_sgemm_available() || !ringgrad::cpu_supports(ringgrad::CpuIsa::avx512)) {
    MESSAGE("no AVX-512F on this CPU (or no tiled_sgemm in this build): nothing to compare");
    return;
  }
  int64_t differing = 0, compared = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : {1, 6, 7, 121})
        for (int64_t n : {15, 31, 32, 33, 64, 390})
          for (int64_t k : {1, 128, 385}) {
            rgtest::TestRng rng(static_cast<uint64_t>(m * 7919 + n * 104729 + k * 31 + ta * 2 + tb));
            const int64_t lda = ta ? m : k, ldb = tb ? k : n;
            std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
            for (float& x : a) x = static_cast<float>(rng.uniform(-1, 1));
            for (float& x : b) x = static_cast<float>(rng.uniform(-1, 1));
            std::vector<float> c2(static_cast<size_t>(m * n), 0.5f), c512 = c2;
            {
              rgtest::IsaScope scope(ringgrad::CpuIsa::avx2);
              ringgrad::cpu::tiled_sgemm(ta, tb, m, n, k, 1.25f, a.data(), lda, b.data(), ldb, 0.5f, c2.data(), n);
            }
            {
              rgtest::IsaScope scope(ringgrad::CpuIsa::avx512);
              ringgrad::cpu::tiled_sgemm(ta, tb, m, n, k, 1.25f, a.data(), lda, b.data(), ldb, 0.5f, c512.data(), n);
            }
            for (size_t i = 0; i < c2.size(); ++i) differing += c2[i] != c512[i];
            compared += static_cast<int64_t>(c2.size());
          }
  CHECK(compared > 0);
  CHECK(differing == 0);
}

TEST_CASE("tiled_sgemm: empty shapes and k = 0 follow BLAS") {
  if (!ringgrad::cpu::tiled_sgemm_available()) return;
  // k = 0: C = beta * C; with beta = 0 the NaN in C is overwritten by 0.
  check({false, false, 4, 5, 0, 1, 1.0f, 0.0f}, ringgrad::cpu::tiled_sgemm);
  check({true, true, 4, 5, 0, 0, 1.0f, 0.5f}, ringgrad::cpu::tiled_sgemm);
  // alpha = 0: A and B are not read (their Inf would make NaN), C = beta * C.
  {
    const float inf = std::numeric_limits<float>::infinity();
    const float a2[2] = {inf, inf}, b2[2] = {inf, inf};
    float c2[1] = {std::numeric_limits<float>::quiet_NaN()};
    ringgrad::cpu::tiled_sgemm(false, false, 1, 1, 2, 0.0f, a2, 2, b2, 1, 0.0f, c2, 1);
    CHECK(c2[0] == 0.0f);
    c2[0] = 3.0f;
    ringgrad::cpu::tiled_sgemm(false, false, 1, 1, 2, 0.0f, a2, 2, b2, 1, 0.5f, c2, 1);
    CHECK(c2[0] == 1.5f);
  }
  // m = 0 or n = 0: nothing is touched.
  float c = 7.0f;
  const float a = 1.0f, b = 2.0f;
  ringgrad::cpu::tiled_sgemm(false, false, 0, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  ringgrad::cpu::tiled_sgemm(false, false, 1, 0, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
  CHECK(c == 7.0f);
}

TEST_CASE("cpu::gemm gives the same products on the tiled path and on OpenBLAS's") {
  // cpu::gemm hands short products (k <= 384) to tiled_sgemm and long ones to OpenBLAS; both
  // sides of that line, and the GPT-mini shapes that motivated the kernel, through the dispatcher.
  const Case cases[] = {
      {false, true, 256, 384, 128, 0, 1.0f, 0.0f},     // x W^T of c_attn (tokens, 3C)
      {false, false, 256, 128, 384, 0, 1.0f, 0.0f},    // dY W of c_attn
      {true, false, 384, 128, 256, 0, 1.0f, 1.0f},     // dY^T x, accumulated into .grad
      {false, true, 128, 128, 32, 352, 0.125f, 0.0f},  // one head's q k^T, rows of width 3C
      {false, true, 64, 512, 784, 0, 1.0f, 0.0f},      // W1's first layer: OpenBLAS
      {true, false, 96, 40, 1000, 2, 1.0f, 0.5f},      // a long product: OpenBLAS
  };
  // Two pool threads, so large products are split into blocks that run tiled_sgemm concurrently
  // (each thread with its own packing buffers); restored afterwards.
  // On AVX2 the long ones go to OpenBLAS; on AVX-512 the tile takes them too (tiled_sgemm_suits).
  const int threads_before = ringgrad::num_threads();
  ringgrad::set_num_threads(2);
  for (ringgrad::CpuIsa isa : rgtest::isas_to_test("tiled_sgemm")) {
    CAPTURE(ringgrad::cpu_isa_name(isa));
    rgtest::IsaScope scope(isa);
    for (const Case& c : cases) {
      check(c, [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* out, int64_t ldc) {
        ringgrad::cpu::gemm(ringgrad::DType::f32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc);
      });
    }
  }
  ringgrad::set_num_threads(threads_before);
}

TEST_CASE("tiled_sgemm takes the one-panel products on AVX2, and every product a tile wide on AVX-512") {
  if (!ringgrad::cpu::tiled_sgemm_available()) return;
  using ringgrad::cpu::tiled_sgemm_suits;
  {
    rgtest::IsaScope scope(ringgrad::CpuIsa::avx2);
    CHECK(tiled_sgemm_suits(false, 2048, 384, 128));
    CHECK(tiled_sgemm_suits(true, 128, 32, 384));
    CHECK_FALSE(tiled_sgemm_suits(true, 384, 128, 2048));
    CHECK_FALSE(tiled_sgemm_suits(false, 128, 512, 785));
  }
  if (!ringgrad::cpu_supports(ringgrad::CpuIsa::avx512)) return;
  rgtest::IsaScope scope(ringgrad::CpuIsa::avx512);
  CHECK(tiled_sgemm_suits(false, 2048, 384, 128));
  CHECK(tiled_sgemm_suits(true, 384, 128, 2048));  // a weight gradient, K = batch x tokens
  CHECK(tiled_sgemm_suits(false, 128, 512, 785));
  CHECK(tiled_sgemm_suits(false, 128, 32, 785));        // one full tile wide
  CHECK_FALSE(tiled_sgemm_suits(false, 128, 10, 512));  // a 10-class head: OpenBLAS
  CHECK(tiled_sgemm_suits(false, 128, 10, 384));        // short products: always the tile
}
