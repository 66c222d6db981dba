// Note [Our own GEMM for short products]
// ---------------------------------------
// Why: OpenBLAS packs both operands and zeroes C (`sgemm_beta`) before every beta = 0 product. Most
// of W3's (GPT-mini, n_embd 128) products are short: K = 128 (x W^T, dY W for 128-wide layers) or
// K = 32 / 128 per attention head (T = 128, head dim 32), so each packed element is used only a few
// times and the zero pass over C costs as much as a sixteenth of the multiply (tuning history:
// docs/performance.md, "ringgrad's own f32 GEMM").
//
// What: the classic three-level blocking (Goto / BLIS) with a 6 x 16 register tile of C held in
// twelve AVX2 registers (6 x 32 in twelve AVX-512 registers where cpu_isa() selects AVX-512: the same
// loop with B packed 32 columns wide), but packing only what pays:
//   - B is packed into slivers of 16 columns (k-major, zero-padded past n), kKC x kNC at a time,
//     and reused by every row of A. A transposed B (x W^T, the forward of every linear layer) is
//     transposed while packing.
//   - A is not packed: the kernel broadcasts A(i, k) straight from the caller's rows (row-major A)
//     or columns (transposed A). Only a transposed A feeding many slivers (n >= 128) is packed,
//     because then each k touches a new cache line of A for the same six values.
//   - C is written once per K panel; the first panel stores alpha * AB (+ beta * C0 only when
//     beta != 0; C0 is C, or for tiled_sgemm_from a bias row), so there is no zero pass.
//
// When (tiled_sgemm_suits): on the AVX2 path, K <= kKC, i.e. the product is one K panel; on the
// AVX-512 path also every longer product at least one tile wide (n >= 32), where the 32-wide tile at
// twice the AVX2 width beats OpenBLAS's AVX2 kernel. Longer products on the AVX2 path stay with
// OpenBLAS: there its packing is amortised and its assembly micro-kernel is faster than this one.
#include "core/cpu/tiled_sgemm.h"

#include "core/cpu_isa.h"
#include "core/elementwise.h"
#include "core/env.h"
#include "core/error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "core/cpu/transpose8.h"
#define RINGGRAD_TILED_SGEMM 1
#endif

namespace ringgrad::cpu {

#ifdef RINGGRAD_TILED_SGEMM
namespace {

constexpr int64_t kMR = 6;      // rows of one register tile of C
constexpr int64_t kNR = 16;     // columns of one AVX2 register tile (two 8-float vectors)
constexpr int64_t kNR512 = 32;  // columns of one AVX-512 register tile (two 16-float vectors)
constexpr int64_t kKC = 384;    // depth of one packed panel of B (a sliver: 384 x 16 floats = 24 KiB, in L1)
constexpr int64_t kNC = 384;    // columns of one packed panel of B (a multiple of both tile widths)
constexpr int64_t kMC = 120;    // rows of A swept per sliver of B (120 x 384 floats = 180 KiB, in L2)

// Packs B(k0 : k0+kc, j0 : j0+nc) into slivers of NR columns (the tile width: 16 for AVX2, 32 for
// AVX-512): sliver s holds, for each kk, the values B(k0+kk, j0 + s*NR + 0..NR-1), zero past column
// n (so the kernel never branches on width). AVX2 code on either path: packing moves data, and
// 8-float moves keep up with it.
template <int64_t kNR>
void pack_b(bool trans_b, const float* b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  for (int64_t s = 0; s * kNR < nc; ++s) {
    const int64_t js = j0 + s * kNR;
    const int64_t width = std::min(kNR, j0 + nc - js);
    float* dst = out + s * kc * kNR;
    if (!trans_b) {  // B(k, j) = b[k * ldb + j]: a sliver row is NR contiguous floats
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = b + (k0 + kk) * ldb + js;
        float* row = dst + kk * kNR;
        if (width == kNR) {
          for (int64_t v = 0; v < kNR; v += 8) _mm256_storeu_ps(row + v, _mm256_loadu_ps(src + v));
        } else {
          for (int64_t j = 0; j < kNR; ++j) row[j] = j < width ? src[j] : 0.0f;
        }
      }
    } else if (width == kNR) {  // B(k, j) = b[j * ldb + k]: transposed 8 x 8 blocks at a time
      for (int64_t half = 0; half < kNR / 8; ++half) {
        const float* src = b + (js + 8 * half) * ldb + k0;
        int64_t kk = 0;
        for (; kk + 8 <= kc; kk += 8) {
          __m256 block[8];
          for (int t = 0; t < 8; ++t) block[t] = _mm256_loadu_ps(src + t * ldb + kk);
          transpose8(block);
          for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dst + (kk + t) * kNR + 8 * half, block[t]);
        }
        for (; kk < kc; ++kk)
          for (int64_t t = 0; t < 8; ++t) dst[kk * kNR + 8 * half + t] = src[t * ldb + kk];
      }
    } else {  // an edge sliver of a transposed B, element by element
      for (int64_t j = 0; j < kNR; ++j) {
        if (j >= width) {  // past column n: zeros (and no pointer formed past the end of b)
          for (int64_t kk = 0; kk < kc; ++kk) dst[kk * kNR + j] = 0.0f;
          continue;
        }
        const float* src = b + (js + j) * ldb + k0;
        for (int64_t kk = 0; kk < kc; ++kk) dst[kk * kNR + j] = src[kk];
      }
    }
  }
}

// Packs rows [i0, i0 + mc) of a transposed A (A(i, k) = a[k * lda + i]) for k in [k0, k0 + kc) into
// slivers of kMR rows, k-major; rows past m repeat the last row (their results are never stored).
void pack_a_transposed(const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  for (int64_t i = i0; i < i0 + mc; i += kMR) {
    const int64_t rows = std::min(kMR, i0 + mc - i);
    float* dst = out + (i - i0) * kc;
    if (rows == kMR) {
      // Six contiguous floats per k: a masked 8-float load (lanes 6, 7 unread, so no read past a)
      // and an 8-float store whose last two lanes the next k overwrites (`out` has 8 floats of slack).
      const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
      for (int64_t kk = 0; kk < kc; ++kk)
        _mm256_storeu_ps(dst + kk * kMR, _mm256_maskload_ps(a + (k0 + kk) * lda + i, six));
      continue;
    }
    for (int64_t kk = 0; kk < kc; ++kk) {
      const float* src = a + (k0 + kk) * lda + i;
      for (int64_t r = 0; r < kMR; ++r) dst[kk * kMR + r] = src[std::min(r, rows - 1)];
    }
  }
}

// gelu(r, j) = GeluOp(c(r, j)) over rows x cols of row stride ld, while the tile is in L1: the
// epilogue of a GEMM whose output a GELU reads next. The plain elementwise kernels' loop
// (core/cpu/elementwise.cpp) on each ISA, so the same bits.
inline void gelu_tile(const float* c, float* gelu, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) gelu[r * ld + j] = GeluOp{}(c[r * ld + j]);
}

__attribute__((target("avx512f"), flatten)) inline void gelu_tile_avx512(const float* c, float* gelu, int64_t ld,
                                                                         int64_t rows, int64_t cols) {
  gelu_tile(c, gelu, ld, rows, cols);  // the same loop, vectorised 16 wide
}

// One register tile: C(0:rows, 0:cols) = alpha * sum_kk A(r, kk) Bp(kk, :) + (first ? beta C0 : C),
// where A(r, kk) = a[row[r] + kk * kstep] (rows of a row-major A: row[r] = r * lda, kstep = 1;
// columns of a transposed or packed A: row[r] = r, kstep = lda or kMR), and C0, what the first K
// panel starts from, is read at c0 with row stride ldc0 (C itself, or one row for every row: a
// bias). When first and beta == 0, nothing is read.
template <bool kFullTile>
inline void tile_kernel(int64_t kc, const float* a, const int64_t* row, int64_t kstep, const float* bp, float* c,
                        int64_t ldc, const float* c0, int64_t ldc0, float* gelu, int64_t rows, int64_t cols,
                        float alpha, float beta, bool first) {
  __m256 acc[kMR][2];
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const float* a_rows[kMR];
  for (int r = 0; r < kMR; ++r) a_rows[r] = a + row[r];
  int64_t idx = 0;
  // Per k: two vectors of B, six broadcasts of A, twelve FMAs (fully unrolled, so acc and a_rows
  // live in registers: 12 accumulators + 2 of B + 1 broadcast of the 16 ymm registers).
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kc; ++kk, idx += kstep, bp += kNR) {
    const __m256 b0 = _mm256_loadu_ps(bp);
    const __m256 b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256 x = _mm256_broadcast_ss(a_rows[r] + idx);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha);
  const bool overwrite = first && beta == 0.0f;
  const float scale_c = first ? beta : 1.0f;
  const float* from = first ? c0 : c;  // what the tile adds to
  const int64_t ld_from = first ? ldc0 : ldc;
  if constexpr (kFullTile) {
    const __m256 vb = _mm256_set1_ps(scale_c);
    for (int r = 0; r < kMR; ++r) {
      float* cr = c + r * ldc;
      const float* fr = from + r * ld_from;
      if (overwrite) {
        _mm256_storeu_ps(cr, _mm256_mul_ps(va, acc[r][0]));
        _mm256_storeu_ps(cr + 8, _mm256_mul_ps(va, acc[r][1]));
      } else {
        _mm256_storeu_ps(cr, _mm256_fmadd_ps(va, acc[r][0], _mm256_mul_ps(vb, _mm256_loadu_ps(fr))));
        _mm256_storeu_ps(cr + 8, _mm256_fmadd_ps(va, acc[r][1], _mm256_mul_ps(vb, _mm256_loadu_ps(fr + 8))));
      }
    }
  } else {  // an edge tile: through a buffer, reading and writing only the rows and columns inside C
    // The same vector arithmetic as a full tile, so an element's value does not depend on whether
    // it fell in an edge tile (cpu::gemm's blocks move the edges with the thread count). acc is
    // indexed by constants only: a run-time index would keep it in memory through the k loop.
    alignas(32) float tile[kMR][kNR] = {};
    const __m256 vb = _mm256_set1_ps(scale_c);
    for (int r = 0; r < kMR; ++r) {
      if (!overwrite && r < rows) std::memcpy(tile[r], from + r * ld_from, static_cast<size_t>(cols) * sizeof(float));
      for (int h = 0; h < 2; ++h) {
        const __m256 old_c = _mm256_load_ps(tile[r] + 8 * h);
        _mm256_store_ps(tile[r] + 8 * h, overwrite ? _mm256_mul_ps(va, acc[r][h])
                                                   : _mm256_fmadd_ps(va, acc[r][h], _mm256_mul_ps(vb, old_c)));
      }
    }
    for (int64_t r = 0; r < rows; ++r) std::memcpy(c + r * ldc, tile[r], static_cast<size_t>(cols) * sizeof(float));
  }
  if (gelu != nullptr) gelu_tile(c, gelu, ldc, kFullTile ? kMR : rows, kFullTile ? kNR : cols);
}

// The same tile with AVX-512: 6 rows x 32 columns, twelve zmm accumulators (of 32), two zmm of B
// and one broadcast per k, so one tile does twice the AVX2 tile's work per k for the same loads of A.
// Each element of C is the same chain of FMAs over kk, in the same order, as on the AVX2 path: the
// two paths give bit-identical results. Compiled for AVX-512F by the attribute alone (the rest of
// the library stays x86-64-v3); called only when cpu_isa() selected it (core/cpu_isa.h).
template <bool kFullTile>
__attribute__((target("avx512f"))) void tile_kernel_avx512(int64_t kc, const float* a, const int64_t* row,
                                                           int64_t kstep, const float* bp, float* c, int64_t ldc,
                                                           const float* c0, int64_t ldc0, float* gelu, int64_t rows,
                                                           int64_t cols, float alpha, float beta, bool first) {
  __m512 acc[kMR][2];
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const float* a_rows[kMR];
  for (int r = 0; r < kMR; ++r) a_rows[r] = a + row[r];
  int64_t idx = 0;
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kc; ++kk, idx += kstep, bp += kNR512) {
    const __m512 b0 = _mm512_loadu_ps(bp);
    const __m512 b1 = _mm512_loadu_ps(bp + 16);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m512 x = _mm512_set1_ps(a_rows[r][idx]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const bool overwrite = first && beta == 0.0f;
  const __m512 vb = _mm512_set1_ps(first ? beta : 1.0f);
  const float* from = first ? c0 : c;  // what the tile adds to
  const int64_t ld_from = first ? ldc0 : ldc;
  if constexpr (kFullTile) {
    for (int r = 0; r < kMR; ++r) {
      float* cr = c + r * ldc;
      const float* fr = from + r * ld_from;
      for (int h = 0; h < 2; ++h) {
        const __m512 out = overwrite ? _mm512_mul_ps(va, acc[r][h])
                                     : _mm512_fmadd_ps(va, acc[r][h], _mm512_mul_ps(vb, _mm512_loadu_ps(fr + 16 * h)));
        _mm512_storeu_ps(cr + 16 * h, out);
      }
    }
  } else {  // an edge tile: masked loads and stores touch only the rows and columns inside C
    // (AVX-512 masks lanes at no cost, so no buffer and no memcpy as on the AVX2 path: edge tiles
    // were ~10% of a W2 step that way, its products being 196 and 784 wide, 64 and 32 tall.)
    const __mmask16 lanes[2] = {static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
                                static_cast<__mmask16>(cols >= 32   ? 0xFFFF
                                                       : cols <= 16 ? 0
                                                                    : (1u << (cols - 16)) - 1)};
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      if (r >= rows) break;
      float* cr = c + r * ldc;
      const float* fr = from + r * ld_from;
      for (int h = 0; h < 2; ++h) {
        const __m512 out =
            overwrite ? _mm512_mul_ps(va, acc[r][h])
                      : _mm512_fmadd_ps(va, acc[r][h], _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(lanes[h], fr + 16 * h)));
        _mm512_mask_storeu_ps(cr + 16 * h, lanes[h], out);
      }
    }
  }
  if (gelu != nullptr) gelu_tile_avx512(c, gelu, ldc, kFullTile ? kMR : rows, kFullTile ? kNR512 : cols);
}

// The two paths as policies of one blocking loop: the tile width and its kernel.
struct Avx2Tiles {
  static constexpr int64_t kWidth = kNR;
  template <bool kFullTile, class... Args>
  static void kernel(Args... args) {
    tile_kernel<kFullTile>(args...);
  }
};
struct Avx512Tiles {
  static constexpr int64_t kWidth = kNR512;
  template <bool kFullTile, class... Args>
  static void kernel(Args... args) {
    tile_kernel_avx512<kFullTile>(args...);
  }
};

template <class Tiles>
void tiled_sgemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                         int64_t lda, const float* b, int64_t ldb, float beta, const float* c0, int64_t ldc0, float* c,
                         int64_t ldc, float* gelu) {
  constexpr int64_t kNR = Tiles::kWidth;  // this path's tile width (shadows the AVX2 one)
  // Per thread (cpu::gemm runs blocks of one product on several pool threads at once), grown once.
  thread_local std::vector<float> packed_b;
  thread_local std::vector<float> packed_a;
  const int64_t kc_max = std::min(kKC, k);
  const int64_t nc_max = std::min(kNC, (n + kNR - 1) / kNR * kNR);
  if (static_cast<int64_t>(packed_b.size()) < kc_max * nc_max) packed_b.resize(kc_max * nc_max);
  const bool pack_a = trans_a && n >= 128;
  const int64_t packed_a_size = (kMC + kMR) * kc_max + 8;  // + 8: pack_a_transposed's overhanging store
  if (pack_a && static_cast<int64_t>(packed_a.size()) < packed_a_size) packed_a.resize(packed_a_size);

  // A(i, kk) = a[i * a_row_step + kk * a_k_step]
  const int64_t a_row_step = trans_a ? 1 : lda;
  const int64_t a_k_step = trans_a ? lda : 1;
  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t nc = std::min(kNC, n - j0);
    for (int64_t k0 = 0; k0 < k; k0 += kKC) {
      const int64_t kc = std::min(kKC, k - k0);
      const bool first = k0 == 0;
      float* gelu_panel = k0 + kc == k ? gelu : nullptr;  // the epilogue, on the last K panel only
      pack_b<kNR>(trans_b, b, ldb, k0, kc, j0, nc, packed_b.data());
      for (int64_t i0 = 0; i0 < m; i0 += kMC) {
        const int64_t mc = std::min(kMC, m - i0);
        if (pack_a) pack_a_transposed(a, lda, i0, mc, k0, kc, packed_a.data());
        for (int64_t s = 0; s * kNR < nc; ++s) {
          const float* bp = packed_b.data() + s * kc * kNR;
          const int64_t cols = std::min(kNR, nc - s * kNR);
          float* c_cols = c + j0 + s * kNR;
          for (int64_t i = i0; i < i0 + mc; i += kMR) {
            const int64_t rows = std::min(kMR, i0 + mc - i);
            int64_t row[kMR];
            const float* a_base;
            int64_t k_step;
            if (pack_a) {
              a_base = packed_a.data() + (i - i0) * kc;
              k_step = kMR;
              for (int64_t r = 0; r < kMR; ++r) row[r] = r;
            } else {
              a_base = a + k0 * a_k_step;
              k_step = a_k_step;
              // rows past m read row m - 1 again (in bounds); their results are not stored
              for (int64_t r = 0; r < kMR; ++r) row[r] = (i + std::min(r, rows - 1)) * a_row_step;
            }
            const float* c0_tile = c0 + i * ldc0 + j0 + s * kNR;
            float* gelu_tile_at = gelu_panel ? gelu_panel + i * ldc + j0 + s * kNR : nullptr;
            if (rows == kMR && cols == kNR)
              Tiles::template kernel<true>(kc, a_base, row, k_step, bp, c_cols + i * ldc, ldc, c0_tile, ldc0,
                                           gelu_tile_at, rows, cols, alpha, beta, first);
            else
              Tiles::template kernel<false>(kc, a_base, row, k_step, bp, c_cols + i * ldc, ldc, c0_tile, ldc0,
                                            gelu_tile_at, rows, cols, alpha, beta, first);
          }
        }
      }
    }
  }
}

}  // namespace

bool tiled_sgemm_available() { return true; }

int64_t gemm_panel_depth() { return kKC; }

void tiled_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  tiled_sgemm_from(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c, ldc);
}

void tiled_sgemm_from(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                      int64_t lda, const float* b, int64_t ldb, float beta, const float* c0, int64_t ldc0, float* c,
                      int64_t ldc, float* gelu) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {  // C = beta * C0; as BLAS: A and B unread, beta == 0 overwrites (NaN too)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c0[i * ldc0 + j];
    if (gelu != nullptr) gelu_rows(c, gelu, ldc, m, n);
    return;
  }
  if (cpu_isa() == CpuIsa::avx512)
    tiled_sgemm_blocked<Avx512Tiles>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc0, c, ldc, gelu);
  else tiled_sgemm_blocked<Avx2Tiles>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc0, c, ldc, gelu);
}

void gelu_rows(const float* c, float* gelu, int64_t ld, int64_t rows, int64_t cols) {
  if (cpu_isa() == CpuIsa::avx512) gelu_tile_avx512(c, gelu, ld, rows, cols);
  else gelu_tile(c, gelu, ld, rows, cols);
}

bool tiled_sgemm_suits(bool /*trans_a*/, int64_t /*m*/, int64_t n, int64_t k) {
  static const bool forced_off = env::choice("RINGGRAD_GEMM", "gemm", {"auto", "openblas"}) == "openblas";
  // With AVX-512 the tile does twice OpenBLAS's AVX2 work per cycle, so it takes the long products
  // too, except narrow ones (n < one tile, e.g. a 10-class head), where most of a 32-wide tile is
  // padding.
  return !forced_off && (k <= kKC || (cpu_isa() == CpuIsa::avx512 && n >= kNR512));
}

#else  // built without AVX2 + FMA: OpenBLAS takes every product

bool tiled_sgemm_available() { return false; }
int64_t gemm_panel_depth() { return 384; }  // any depth: OpenBLAS computes every product
void tiled_sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                 float*, int64_t) {
  RG_FAIL("tiled_sgemm",
          "this build has no AVX2 + FMA (RINGGRAD_ISA_FLAGS); use cpu::gemm, which falls back to OpenBLAS");
}
void tiled_sgemm_from(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                      const float*, int64_t, float*, int64_t, float*) {
  RG_FAIL("tiled_sgemm",
          "this build has no AVX2 + FMA (RINGGRAD_ISA_FLAGS); use cpu::gemm, which falls back to OpenBLAS");
}
void gelu_rows(const float* c, float* gelu, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) gelu[r * ld + j] = GeluOp{}(c[r * ld + j]);
}
bool tiled_sgemm_suits(bool, int64_t, int64_t, int64_t) { return false; }

#endif

}  // namespace ringgrad::cpu
