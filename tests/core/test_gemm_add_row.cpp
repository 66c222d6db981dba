// native::mm_add_row (a linear layer's x W^T + b, and GELU of it): the GEMM that starts from the bias
// row and applies GELU in its epilogue (fusion on, Note [A bias as the GEMM's starting point])
// against its composition, rows filled with b, addmm_, then the GELU op (fusion off): the same bits on both ISAs, at 1 and 2 threads, with transposed operands,
// edge tiles, products OpenBLAS takes, and long products of several K panels; and against a
// double-precision product written out here.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/native/native.h"
#include "ringgrad.h"
#include "test_util.h"

using namespace ringgrad;

using rgtest::ThreadsScope;

TEST_CASE("mm_add_row: the GEMM started from the bias gives the fill-then-accumulate composition's bits") {
  struct Case {
    int64_t m, k, n;
    bool transposed_b;  // b as the transpose of a stored (n, k) weight, as nn::Linear passes it
  };
  // W3's c_attn (2048 x 128 @ 128 x 384^T) cut down, split over 2 threads by columns; a product
  // split by rows (m >= n); edge tiles on both sides (m 7, n 45); K of two and three panels (500,
  // 800); a narrow product (n 10, K 784) that OpenBLAS takes on AVX-512; k 1.
  const std::vector<Case> cases = {{64, 128, 384, true}, {250, 128, 160, true}, {7, 33, 45, true}, {50, 500, 70, false},
                                   {9, 800, 40, true},   {16, 784, 10, true},   {5, 1, 33, false}};
  Generator gen(31);
  for (const Case& c : cases) {
    CAPTURE(c.m);
    CAPTURE(c.k);
    CAPTURE(c.n);
    const Tensor a = randn({c.m, c.k}, gen);
    const Tensor w = randn(c.transposed_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, gen);
    const Tensor b = c.transposed_b ? native::transpose(w, 0, 1) : w;
    const Tensor row = randn({c.n}, gen);
    // Independent reference: the product and the row summed in double.
    const std::vector<double> av = a.to_vector(), bv = b.contiguous().to_vector(), rv = row.to_vector();
    std::vector<double> expected(static_cast<size_t>(c.m * c.n));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = rv[static_cast<size_t>(j)];
        for (int64_t kk = 0; kk < c.k; ++kk)
          sum += av[static_cast<size_t>(i * c.k + kk)] * bv[static_cast<size_t>(kk * c.n + j)];
        expected[static_cast<size_t>(i * c.n + j)] = sum;
      }
    for (const CpuIsa isa : rgtest::isas_to_test("mm_add_row")) {
      rgtest::IsaScope isa_scope(isa);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        ThreadsScope threads_scope(threads);
        std::vector<double> fused, composed, fused_gelu, composed_gelu;
        Tensor gelu;
        {
          rgtest::FusionScope on(true);
          fused = native::mm_add_row(a, b, row).to_vector();
          CHECK(native::mm_add_row(a, b, row, &gelu).to_vector() == fused);
          fused_gelu = gelu.to_vector();
        }
        {
          rgtest::FusionScope off(false);
          composed = native::mm_add_row(a, b, row, &gelu).to_vector();
          composed_gelu = gelu.to_vector();
        }
        CHECK(fused == composed);
        CHECK(fused_gelu == composed_gelu);  // the epilogue's GELU: the GELU op's bits
        double worst = 0;
        for (size_t e = 0; e < fused.size(); ++e) worst = std::max(worst, std::abs(fused[e] - expected[e]));
        CHECK(worst <= 1e-5 * std::sqrt(static_cast<double>(c.k)));
      }
    }
  }
  CHECK_THROWS_WITH_AS(native::mm_add_row(randn({2, 3}, gen), randn({3, 4}, gen), randn({5}, gen)),
                       doctest::Contains("the row must be (4,)"), Error);
}
