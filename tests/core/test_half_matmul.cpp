// CPU f16 / bf16 products computed in f32 blocks (Note [Half-precision products in f32 blocks] in
// core/native/matmul.cpp) against
//   - the computation they replace, written out here: both operands cast to f32 whole, the f32
//     product, the result rounded once. The same bits wherever the CPU's own GEMM takes that f32
//     product (K within one panel, or AVX-512 with every thread's part at least a tile wide);
//   - a triple loop in double over the same half-precision values, everywhere. Tolerance: the f32
//     sums err by at most (k + 2) u sum|a b| (u = 2^-24; products of f16 / bf16 values are exact in
//     f32), and the rounding to the dtype by half its ulp (2^-11 for f16, 2^-8 for bf16).
// The shapes cross the blocks' edges (panels of C, strips 32 columns wide, K parts of the GEMM's panel depth), with
// transposed operands as linear layers pass them; plus bmm, mm_out into a wider matrix, and the
// allocator's peak: the f32 working memory of a product is a few blocks, not copies of the operands.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu/tiled_sgemm.h"
#include "core/native/native.h"
#include "ringgrad.h"
#include "test_util.h"

using namespace ringgrad;

namespace {

using rgtest::ThreadsScope;

// The computation the blocks replace: whole f32 copies, one f32 product, one rounding.
Tensor product_of_whole_f32_copies(const Tensor& a, const Tensor& b) {
  return native::cast(native::mm(native::cast(a, DType::f32), native::cast(b, DType::f32)), a.dtype());
}

// Whether the CPU's own GEMM computes every part of the f32 product (m, k) x (k, n) as cpu::gemm
// splits it over `threads` (Note [GEMMs split over the pool] in core/cpu/gemm.cpp: by rows when
// m >= n, otherwise by columns, in pieces of max(16, ceil(n / threads)) -- parallel_for's pieces,
// as far as the shapes here go).
bool own_gemm_takes(bool trans_a, int64_t m, int64_t n, int64_t k, int threads) {
  const bool split_columns = threads > 1 && m < n && 2.0 * static_cast<double>(m * n * k) >= 4e6;
  if (!split_columns) return cpu::tiled_sgemm_suits(trans_a, m, n, k);
  const int64_t piece = std::max<int64_t>(16, (n + threads - 1) / threads);
  for (int64_t j0 = 0; j0 < n; j0 += piece)
    if (!cpu::tiled_sgemm_suits(trans_a, m, std::min(piece, n - j0), k)) return false;
  return true;
}

void check_against_double(const Tensor& got, const Tensor& a, const Tensor& b) {
  const std::vector<double> g = got.to_vector(), av = a.contiguous().to_vector(), bv = b.contiguous().to_vector();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const double half_ulp = a.dtype() == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, magnitude = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double term = av[static_cast<size_t>(i * k + kk)] * bv[static_cast<size_t>(kk * n + j)];
        want += term;
        magnitude += std::abs(term);
      }
      const double tolerance = half_ulp * std::abs(want) + 6e-8 * static_cast<double>(k + 2) * magnitude * 1.01;
      if (std::abs(g[static_cast<size_t>(i * n + j)] - want) > tolerance + 1e-30) ++bad;
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("half-precision mm in f32 blocks: the bits of whole f32 copies, within rounding of a double product") {
  struct Case {
    int64_t m, k, n;
    bool trans_a, trans_b;  // a / b as the transpose of a stored matrix
  };
  // A linear layer's forward (x W^T) over several row panels with an edge (300 x 260), and with K in
  // two parts (K 500 = 384 + 116); its weight gradient (g^T x, transposed a) in one K part (300) and
  // in three over two column panels (900 = 384 + 384 + 132); a narrow product that OpenBLAS takes
  // whole on AVX-512 (n 20, K 800); one element; K = 0; M = 0.
  const std::vector<Case> cases = {{300, 128, 260, false, true}, {90, 500, 100, false, true},
                                   {130, 300, 140, true, false}, {70, 900, 200, true, false},
                                   {50, 800, 20, false, false},  {1, 5, 1, false, false},
                                   {4, 0, 5, false, false},      {0, 7, 3, false, false}};
  Generator gen(47);
  for (const Case& c : cases) {
    CAPTURE(c.m);
    CAPTURE(c.k);
    CAPTURE(c.n);
    for (const CpuIsa isa : rgtest::isas_to_test("half-precision mm")) {
      rgtest::IsaScope isa_scope(isa);
      // bf16 goes through the blocks only where the CPU has no bf16 dot product (or AVX-512 is not
      // selected); core/cpu/bf16_gemm.cpp's own tests cover it otherwise.
      std::vector<DType> dtypes{DType::f16};
      if (!cpu_has_bf16_dot()) dtypes.push_back(DType::bf16);
      for (const DType dtype : dtypes) {
        CAPTURE(dtype_name(dtype));
        const Tensor a_stored = randn(c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, gen).to(dtype);
        const Tensor b_stored = randn(c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, gen).to(dtype);
        const Tensor a = c.trans_a ? native::transpose(a_stored, 0, 1) : a_stored;
        const Tensor b = c.trans_b ? native::transpose(b_stored, 0, 1) : b_stored;
        REQUIRE(native::needs_f32_compute(a));
        for (const int threads : {1, 2}) {
          CAPTURE(threads);
          ThreadsScope threads_scope(threads);
          const Tensor got = native::mm(a, b);
          REQUIRE(got.dtype() == dtype);
          check_against_double(got, a, b);
          if (own_gemm_takes(c.trans_a, c.m, c.n, c.k, threads))
            CHECK(got.to_vector() == product_of_whole_f32_copies(a, b).to_vector());
        }
      }
    }
  }
}

TEST_CASE("half-precision bmm and mm_out in f32 blocks") {
  Generator gen(48);
  const Tensor a = randn({3, 40, 64}, gen).to(DType::f16), b = randn({3, 64, 150}, gen).to(DType::f16);
  const Tensor got = native::bmm(a, b);
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor ai = native::select(a, 0, i), bi = native::select(b, 0, i);
    const Tensor slice_got = native::select(got, 0, i);
    CHECK(slice_got.to_vector() == product_of_whole_f32_copies(ai, bi).to_vector());
    check_against_double(slice_got, ai, bi);
  }
  // mm_out into the first 150 columns of a (40, 160) matrix: the last 10 columns keep their values.
  const Tensor wide = full({40, 160}, 7.0, TensorOptions{DType::f16});
  const Tensor a0 = native::select(a, 0, 0), b0 = native::select(b, 0, 0);
  native::mm_out(native::slice(wide, 1, 0, 150, 1), a0, b0);
  CHECK(native::contiguous(native::slice(wide, 1, 0, 150, 1)).to_vector() ==
        product_of_whole_f32_copies(a0, b0).to_vector());
  const std::vector<double> rest = native::contiguous(native::slice(wide, 1, 150, 160, 1)).to_vector();
  CHECK(rest == std::vector<double>(rest.size(), 7.0));
}

TEST_CASE("half-precision mm in f32 blocks: f32 working memory is a few blocks, not copies of the operands") {
  // GPT-mini's MLP output projection's weight gradient: dW (128, 512) = g^T (128, 2048) h (2048, 512)
  // in f16. Whole f32 copies would hold 1 MiB (g) + 4 MiB (h) + 0.25 MiB (dW) at once.
  ThreadsScope threads_scope(1);
  Generator gen(49);
  const Tensor g = randn({2048, 128}, gen).to(DType::f16), h = randn({2048, 512}, gen).to(DType::f16);
  const Device cpu = Device::cpu();
  reset_peak_memory_stats(cpu);
  const size_t before = memory_stats(cpu).allocated;
  const Tensor dw = native::mm(native::transpose(g, 0, 1), h);
  const MemoryStats after = memory_stats(cpu);
  const size_t result_bytes = allocation_size_class(dw.nbytes());
  // The f32 strips of A and B and the panel of C: at most 192 KiB (kWorkingFloats), three
  // allocations each rounded up to its size class (at most 25%).
  CHECK(after.peak_allocated - before <= result_bytes + 240 * 1024);
  CHECK(after.peak_allocated - before >= result_bytes);  // the measurement sees the result at least
}

TEST_CASE("convert_rows: f16 <-> f32 along strided rows, the bits of the scalar conversions") {
  // The F16C paths (8 values at a time) and their tails, against half_bits_to_float and
  // float_to_half_bits (core/dtype.h): every f16 bit pattern but NaNs one way; the other way ties,
  // the f16 overflow edge (65504, 65519.99 and 65520), subnormals, zeros and infinities.
  std::vector<uint16_t> halves;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if (!((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0)) halves.push_back(static_cast<uint16_t>(h));
  const int64_t cols = 61, in_ld = 64, out_ld = 70;  // rows of 61: seven groups of 8 and a tail of 5
  const int64_t rows = static_cast<int64_t>(halves.size()) / cols;
  std::vector<uint16_t> in(static_cast<size_t>(rows * in_ld), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      in[static_cast<size_t>(r * in_ld + c)] = halves[static_cast<size_t>(r * cols + c)];
  std::vector<float> out(static_cast<size_t>(rows * out_ld), -1.0f);
  cpu::convert_rows(DType::f32, DType::f16, in.data(), in_ld, out.data(), out_ld, rows, cols);
  int wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float want = half_bits_to_float(in[static_cast<size_t>(r * in_ld + c)]);
      wrong += std::memcmp(&want, &out[static_cast<size_t>(r * out_ld + c)], sizeof want) != 0;
    }
    for (int64_t c = cols; c < out_ld; ++c) wrong += out[static_cast<size_t>(r * out_ld + c)] != -1.0f;  // untouched
  }
  CHECK(wrong == 0);

  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       1.0f,
                                       -2.5f,
                                       65504.0f,
                                       65519.99f,
                                       65520.0f,
                                       -65536.0f,
                                       1e-5f,
                                       6.1e-5f,
                                       5.96e-8f,
                                       2.98e-8f,
                                       2.99e-8f,
                                       1e-9f,
                                       1.0009765625f,
                                       1.00048828125f,
                                       1.00146484375f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       3.14159f,
                                       -7e4f};
  std::vector<uint16_t> rounded(specials.size());
  cpu::convert_rows(DType::f16, DType::f32, specials.data(), 0, rounded.data(), 0, 1,
                    static_cast<int64_t>(specials.size()));
  for (size_t i = 0; i < specials.size(); ++i) {
    CAPTURE(specials[i]);
    CHECK(rounded[i] == float_to_half_bits(specials[i]));
  }
}
