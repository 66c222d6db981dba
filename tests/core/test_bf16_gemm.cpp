// The CPU's bf16 GEMM (core/cpu/bf16_gemm.cpp, AVX512_BF16) against a triple loop in double
// precision over the same bf16 values, and against the f32 computation it replaces.
//
// The shapes cross every blocking edge: m around the 6-row tile and the 120-row A block, n around
// the 32-column sliver and the 384-column B panel, k odd and even around the 512-deep panel (deeper
// products go through the f32 scratch), with all four transpose combinations, row strides wider than
// the matrices, and alpha / beta including beta = 0 over a C full of NaN (BLAS: C is not read).
//
// Tolerance: the f32 sum errs by at most (k + 2)·u·|alpha|·Σ|a·b| (u = 2^-24; the products of bf16
// values are exact in f32), and the final rounding to bf16 by half an ulp of bf16, 2^-9 relative; so
// |got - want| <= 2^-8·|want| + 1.2e-7·(k + 2)·|alpha|·Σ|a·b|·(1 + 2^-8) accepts any summation order.
// A wrong row, column, pair, panel or scaling is far outside it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../core/test_util.h"
#include "core/cpu/bf16_gemm.h"
#include "core/cpu_isa.h"
#include "core/kernels.h"

namespace {

using rgtest::TestRng;
using ringgrad::bf16_bits_to_float;
using ringgrad::float_to_bf16_bits;

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t pad;  // extra columns in every stored row (lda, ldb, ldc wider than the matrices)
  float alpha, beta;
};

using Bf16Gemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*,
                          int64_t, float, uint16_t*, int64_t);

bool have_bf16_dot() {
  if (ringgrad::cpu_has_bf16_dot()) return true;
  MESSAGE("this CPU has no AVX512_BF16 (or AVX-512 is not selected): the bf16 GEMM is not tested here");
  return false;
}

// Runs one product through `gemm` and compares every element of C with the double-precision
// product of the same bf16 values; padding columns must keep their values. Returns C.
std::vector<uint16_t> check(const Case& c, Bf16Gemm gemm) {
  TestRng rng(static_cast<uint64_t>(c.m * 1000003 + c.n * 1009 + c.k * 7 + c.trans_a * 2 + c.trans_b));
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  auto random_bf16 = [&] { return float_to_bf16_bits(static_cast<float>(rng.uniform(-1, 1))); };
  std::vector<uint16_t> a(static_cast<size_t>(a_rows * lda)), b(static_cast<size_t>(b_rows * ldb));
  std::vector<uint16_t> out(static_cast<size_t>(c.m * ldc));
  for (uint16_t& x : a) x = random_bf16();
  for (uint16_t& x : b) x = random_bf16();
  const uint16_t nan = float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  for (uint16_t& x : out) x = c.beta == 0.0f ? nan : random_bf16();
  const std::vector<uint16_t> before = out;
  auto A = [&](int64_t i, int64_t p) {
    return double(bf16_bits_to_float(c.trans_a ? a[p * lda + i] : a[i * lda + p]));
  };
  auto B = [&](int64_t p, int64_t j) {
    return double(bf16_bits_to_float(c.trans_b ? b[j * ldb + p] : b[p * ldb + j]));
  };

  gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(), ldc);

  int64_t wrong = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const uint16_t got_bits = out[i * ldc + j];
      if (j >= c.n) {  // padding: untouched, bit for bit
        if (got_bits != before[i * ldc + j]) ++wrong;
        continue;
      }
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        sum += A(i, p) * B(p, j);
        magnitude += std::fabs(A(i, p) * B(p, j));
      }
      double want = c.alpha * sum;
      if (c.beta != 0.0f) want += double(c.beta) * bf16_bits_to_float(before[i * ldc + j]);
      const double got = bf16_bits_to_float(got_bits);
      const double tol = 0x1p-8 * std::fabs(want) + 1.21e-7 * double(c.k + 2) * std::fabs(c.alpha) * magnitude;
      if (!(std::fabs(got - want) <= tol)) {
        if (wrong < 3)
          MESSAGE("C(" << i << ", " << j << ") = " << got << ", want " << want << " (m " << c.m << " n " << c.n << " k "
                       << c.k << " ta " << c.trans_a << " tb " << c.trans_b << " beta " << c.beta << ")");
        ++wrong;
      }
    }
  }
  CHECK(wrong == 0);
  return out;
}

std::vector<Case> edge_cases() {
  std::vector<Case> cases;
  const int64_t ms[] = {1, 5, 6, 7, 121, 245};
  const int64_t ns[] = {1, 15, 31, 32, 33, 390, 400};
  const int64_t ks[] = {1, 2, 17, 64, 511, 512, 513, 1100};  // 1100: three panels through the f32 scratch
  int i = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : ms)
        for (int64_t n : ns)
          for (int64_t k : ks) {
            ++i;
            if (i % 4 != 0 && !(m == 245 && n >= 390 && k >= 512)) continue;  // a quarter, and the largest
            // beta, padding and alpha from independent counters, so every combination occurs
            const int j = i / 4;
            const float beta = (j % 3 == 0) ? 0.0f : (j % 3 == 1) ? 1.0f : 0.5f;
            const int64_t pad = (j / 3) % 2 == 0 ? 0 : 3;
            const float alpha = (j / 6) % 2 == 0 ? 1.0f : -1.5f;
            cases.push_back({ta, tb, m, n, k, pad, alpha, beta});
          }
  return cases;
}

}  // namespace

TEST_CASE("bf16_gemm matches a double-precision triple loop across every blocking edge") {
  if (!have_bf16_dot()) return;
  for (const Case& c : edge_cases()) check(c, ringgrad::cpu::bf16_gemm);
}

TEST_CASE("bf16_gemm rounds once, to nearest even, and keeps NaN and infinity") {
  if (!have_bf16_dot()) return;
  auto bits = [](float v) { return float_to_bf16_bits(v); };
  // C(1, 4) = A(1, 2) B(2, 4), every value exact in f32: 257 and 259 lie halfway between bf16
  // neighbours (256, 258, 260) and round to the even one; 1 + 2^-8 lies halfway between 1 and
  // 1 + 2^-7 and rounds down; -3.0 is exact.
  const uint16_t a[2] = {bits(1.0f), bits(1.0f)};
  const uint16_t b[2 * 4] = {bits(256.0f), bits(256.0f), bits(1.0f),    bits(-2.0f),  //
                             bits(1.0f),   bits(3.0f),   bits(0x1p-8f), bits(-1.0f)};
  uint16_t c[4] = {};
  ringgrad::cpu::bf16_gemm(false, false, 1, 4, 2, 1.0f, a, 2, b, 4, 0.0f, c, 4);
  CHECK(c[0] == bits(256.0f));
  CHECK(c[1] == bits(260.0f));
  CHECK(c[2] == bits(1.0f));
  CHECK(c[3] == bits(-3.0f));
  // A NaN or an infinity in A reaches its row of C; 0 * inf is NaN, as in f32.
  const uint16_t a_special[2] = {bits(std::numeric_limits<float>::infinity()), bits(0.0f)};
  ringgrad::cpu::bf16_gemm(false, false, 1, 4, 2, 1.0f, a_special, 2, b, 4, 0.0f, c, 4);
  CHECK(std::isinf(bf16_bits_to_float(c[0])));
  CHECK(std::isinf(bf16_bits_to_float(c[3])));
  CHECK(bf16_bits_to_float(c[3]) < 0);
  const uint16_t a_nan[2] = {bits(std::numeric_limits<float>::quiet_NaN()), bits(1.0f)};
  ringgrad::cpu::bf16_gemm(false, false, 1, 4, 2, 1.0f, a_nan, 2, b, 4, 0.0f, c, 4);
  for (uint16_t v : c) CHECK(std::isnan(bf16_bits_to_float(v)));
}

TEST_CASE("bf16_gemm: empty shapes and k = 0 follow BLAS") {
  if (!have_bf16_dot()) return;
  const uint16_t one = float_to_bf16_bits(1.0f), two = float_to_bf16_bits(2.0f);
  uint16_t c[2] = {float_to_bf16_bits(3.0f), float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN())};
  ringgrad::cpu::bf16_gemm(false, false, 1, 1, 0, 1.0f, &one, 1, &two, 1, 0.5f, c, 1);  // C = beta * C
  CHECK(c[0] == float_to_bf16_bits(1.5f));
  ringgrad::cpu::bf16_gemm(false, false, 1, 1, 0, 1.0f, &one, 1, &two, 1, 0.0f, c + 1, 1);  // beta 0: NaN dropped
  CHECK(c[1] == 0);
  ringgrad::cpu::bf16_gemm(false, false, 0, 1, 1, 1.0f, &one, 1, &two, 1, 0.0f, c, 1);  // m = 0: untouched
  CHECK(c[0] == float_to_bf16_bits(1.5f));
}

TEST_CASE("cpu::gemm in bf16 gives the same bits on one thread and split over two") {
  if (!have_bf16_dot()) return;
  // Each element of C is one chain of dot products over k whatever block of rows or columns it falls
  // in, so splitting a product over the pool changes no bit. The shapes: the MLP's first layer
  // (x W^T, K = 784: the scratch path), its weight gradient (a transposed A), GPT-mini's c_attn.
  const Case cases[] = {
      {false, true, 128, 512, 784, 0, 1.0f, 0.0f},
      {true, false, 512, 784, 128, 0, 1.0f, 1.0f},
      {false, true, 2048, 384, 128, 0, 1.0f, 0.0f},
  };
  const int threads_before = ringgrad::num_threads();
  for (const Case& c : cases) {
    ringgrad::set_num_threads(1);
    const std::vector<uint16_t> one = check(c, ringgrad::cpu::bf16_gemm);
    ringgrad::set_num_threads(2);
    const std::vector<uint16_t> two =
        check(c, [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, float beta, uint16_t* out, int64_t ldc) {
          ringgrad::cpu::gemm(ringgrad::DType::bf16, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldc);
        });
    CHECK(one == two);
  }
  ringgrad::set_num_threads(threads_before);
}

TEST_CASE("bf16 mm agrees on the dot-product path and on the f32 path it replaces") {
  // mm on bf16 tensors: through bf16_gemm where AVX512_BF16 is selected, through f32 compute (cast,
  // f32 GEMM, one rounding) on AVX2. Both round the same f32-accurate sums once, so they differ at
  // most where the f32 sums straddle a bf16 rounding boundary: by one bf16 ulp, rarely.
  using namespace ringgrad;
  const Tensor a = rgtest::random_tensor({70, 300}, 11, -1, 1, DType::bf16);
  const Tensor b = rgtest::random_tensor({300, 45}, 12, -1, 1, DType::bf16);
  std::vector<Tensor> results;
  for (CpuIsa isa : rgtest::isas_to_test("bf16 mm")) {
    rgtest::IsaScope scope(isa);
    results.push_back(mm(a, b));
    CHECK(results.back().dtype() == DType::bf16);
  }
  if (results.size() < 2 || !cpu_has_bf16_dot()) return;
  const std::vector<double> x = results[0].to_vector(), y = results[1].to_vector();
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != y[i]) ++differ;
    CHECK(std::fabs(x[i] - y[i]) <= 0x1p-7 * std::fabs(x[i]));  // one ulp of bf16
  }
  CHECK(differ <= static_cast<int64_t>(x.size()) / 20);
}
