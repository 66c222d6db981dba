// Note [bf16 products on the CPU]
// -------------------------------
// Why: OpenBLAS has no bf16 GEMM; computing a bf16 product in f32 takes three extra passes over
// memory (both operands cast to f32, the result cast back) around the same f32 arithmetic, slower
// than f32 itself. AVX512_BF16's VDPBF16PS multiplies pairs of bf16 values and adds both products
// into one f32 lane: 32 multiply-adds per 512-bit instruction, twice an f32 FMA's 16, from operands
// half the size (tuning history: docs/performance.md, "bf16 products: AVX512_BF16").
//
// What: the blocking of the tiled f32 GEMM (Note [Our own GEMM for short products] in
// tiled_sgemm.cpp) with a 6 x 32 tile of f32 accumulators in twelve zmm registers, stepping k two
// at a time:
//   - B is packed into slivers of 32 columns whose 32-bit words hold the pairs (B(k, j), B(k+1, j)),
//     the layout the instruction reads; zeros past column n, and in the upper half past an odd k.
//   - A's pair (A(i, k), A(i, k+1)) is broadcast as one 32-bit word. A row-major A holds it
//     contiguously and is read in place; a transposed A is packed into such pairs first.
//   - C is rounded to bf16 once, to nearest even exactly as float_to_bf16_bits (core/dtype.h). A
//     product deeper than one K panel accumulates its panels in an f32 scratch and rounds at the end.
// Accuracy: a product of two bf16 values is exact in f32, and the instruction adds the two products
// of a pair to the lane one after the other, each addition rounded to f32 -- so the result differs
// from the f32 GEMM of the same bf16 values only by the order of f32 additions, before the final
// rounding to bf16. The instruction treats denormal inputs and results as zero whatever MXCSR says
// (checked on this CPU); bf16 values below 1e-38 play no part in training.
//
// Used where cpu_has_bf16_dot() (core/cpu_isa.h): the CPU has AVX512_BF16 and AVX-512 is selected.
// Elsewhere bf16 products are still computed in f32 (needs_f32_compute, core/native/matmul.cpp).
// Every function carries its target attribute, so the file builds whatever -march the library has.
#include "core/cpu/bf16_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu/transpose8.h"
#include "core/cpu_isa.h"
#include "core/dtype.h"
#include "core/error.h"

// GCC 12's AVX-512 integer intrinsics pass _mm512_undefined_epi32(), a self-initialised variable,
// as the unused source of their unmasked forms, and -Wmaybe-uninitialized reports it wherever they
// are inlined (GCC bug 105593). Nothing reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define RG_BF16_TARGET __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ringgrad::cpu {
namespace {

constexpr int64_t kMR = 6;    // rows of one register tile of C
constexpr int64_t kNR = 32;   // columns of one tile: two vectors of 16 f32 accumulators
constexpr int64_t kKC = 512;  // depth of one panel: a sliver is 256 pairs x 32 words = 32 KiB, in L1
constexpr int64_t kNC = 384;  // columns of one packed panel of B (a multiple of kNR)
constexpr int64_t kMC = 120;  // rows of A swept per sliver of B (a multiple of kMR)

// Two consecutive bf16 values as one 32-bit word, the lower address in the low half (x86 is
// little-endian); `hi` = 0 pads a pair past the last k.
inline uint32_t pair_word(uint16_t lo, uint16_t hi) { return lo | static_cast<uint32_t>(hi) << 16; }
inline uint32_t load_pair(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// Packs B(k0 : k0+kc, j0 : j0+nc) into slivers of kNR columns: sliver s holds, for pair p (rows
// k0 + 2p and k0 + 2p + 1), the words pair_word(B(k, j), B(k+1, j)) of j = j0 + s*kNR + 0..kNR-1.
RG_BF16_TARGET void pack_b(bool trans_b, const uint16_t* b, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                           uint32_t* out) {
  const int64_t full = kc / 2, pairs = (kc + 1) / 2;  // pairs with two rows; with the odd last row
  for (int64_t s = 0; s * kNR < nc; ++s) {
    const int64_t js = j0 + s * kNR;
    const int64_t width = std::min(kNR, j0 + nc - js);
    uint32_t* dst = out + s * pairs * kNR;
    if (!trans_b) {  // B(k, j) = b[k * ldb + j]: rows k and k+1 interleaved
      for (int64_t p = 0; p < pairs; ++p) {
        const uint16_t* r0 = b + (k0 + 2 * p) * ldb + js;
        const uint16_t* r1 = p < full ? r0 + ldb : nullptr;
        uint32_t* words = dst + p * kNR;
        if (width == kNR && r1 != nullptr) {
          for (int64_t h = 0; h < kNR; h += 16) {
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + h));
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1 + h));
            const __m256i lo = _mm256_unpacklo_epi16(x0, x1);  // columns 0-3 | 8-11 (per 128-bit lane)
            const __m256i hi = _mm256_unpackhi_epi16(x0, x1);  // columns 4-7 | 12-15
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + h), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + h + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
          }
        } else {
          for (int64_t j = 0; j < kNR; ++j) words[j] = j < width ? pair_word(r0[j], r1 != nullptr ? r1[j] : 0) : 0;
        }
      }
    } else if (width == kNR) {  // B(k, j) = b[j * ldb + k]: a column's pairs are contiguous words,
                                // so packing is an 8 x 8 transpose of words
      for (int64_t q = 0; q < kNR; q += 8) {
        const uint16_t* src = b + (js + q) * ldb + k0;
        int64_t p = 0;
        for (; p + 8 <= full; p += 8) {
          __m256 block[8];
          for (int t = 0; t < 8; ++t)
            block[t] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t * ldb + 2 * p)));
          transpose8(block);
          for (int t = 0; t < 8; ++t) _mm256_storeu_ps(reinterpret_cast<float*>(dst + (p + t) * kNR + q), block[t]);
        }
        for (; p < pairs; ++p)
          for (int64_t t = 0; t < 8; ++t) {
            const uint16_t* col = src + t * ldb + 2 * p;
            dst[p * kNR + q + t] = pair_word(col[0], p < full ? col[1] : 0);
          }
      }
    } else {  // an edge sliver of a transposed B, pair by pair (no pointer formed past column n)
      for (int64_t j = 0; j < kNR; ++j) {
        const uint16_t* col = j < width ? b + (js + j) * ldb + k0 : nullptr;
        for (int64_t p = 0; p < pairs; ++p)
          dst[p * kNR + j] = col == nullptr ? 0 : pair_word(col[2 * p], p < full ? col[2 * p + 1] : 0);
      }
    }
  }
}

// Packs rows [i0, i0 + mc) of a transposed A (A(i, k) = a[k * lda + i]), k in [k0, k0 + kc), into
// slivers of kMR rows: sliver t holds, for pair p, the words pair_word(A(i, k), A(i, k+1)) of its six
// rows; rows past m repeat the last row (their results are never stored).
void pack_a_transposed(const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint32_t* out) {
  const int64_t full = kc / 2, pairs = (kc + 1) / 2;
  for (int64_t i = i0; i < i0 + mc; i += kMR) {
    const int64_t rows = std::min(kMR, i0 + mc - i);
    uint32_t* dst = out + (i - i0) * pairs;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* r0 = a + (k0 + 2 * p) * lda + i;
      const uint16_t* r1 = r0 + lda;
      for (int64_t r = 0; r < kMR; ++r) {
        const int64_t ri = std::min(r, rows - 1);
        dst[p * kMR + r] = pair_word(r0[ri], p < full ? r1[ri] : 0);
      }
    }
  }
}

// f32 -> bf16 bits of 16 lanes, to nearest even, NaN quietened: float_to_bf16_bits, vectorised.
RG_BF16_TARGET inline __m256i to_bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __m512i quiet_nan = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet_nan), 16));
}

// Loads and stores of up to 16 elements of C (the lanes in `lanes`) as f32 vectors: C in bf16, or
// the f32 scratch of a product deeper than one panel.
RG_BF16_TARGET inline __m512 load_c(const uint16_t* c, __mmask16 lanes) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes, c)), 16));
}
RG_BF16_TARGET inline __m512 load_c(const float* c, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, c); }
RG_BF16_TARGET inline void store_c(uint16_t* c, __mmask16 lanes, __m512 v) {
  _mm256_mask_storeu_epi16(c, lanes, to_bf16_bits(v));
}
RG_BF16_TARGET inline void store_c(float* c, __mmask16 lanes, __m512 v) { _mm512_mask_storeu_ps(c, lanes, v); }

// A pair word in all 16 lanes. Through a 128-bit register, not _mm512_set1_epi32: clang 16 crashes
// (it recurses until its stack runs out) on a set1 or set1_ps bit-cast to __m512bh; GCC and clang 14
// compile either to the same vpbroadcastd.
RG_BF16_TARGET inline __m512bh broadcast_pair(uint32_t word) {
  return (__m512bh)_mm512_broadcastd_epi32(_mm_cvtsi32_si128(static_cast<int>(word)));
}

// One register tile: C(0:rows, 0:cols) = alpha * sum_k A(r, k) Bp(k, :) + (first ? beta : 1) * C.
// A's pair p of tile row r is the word at a + row[r] + p * pair_step (bf16 units: a row-major A has
// row[r] = r * lda, pair_step = 2; a packed A row[r] = 2r, pair_step = 2 * kMR). An odd kc ends with
// one lone element, broadcast with a zero upper half (the word would reach past the row).
template <class Out>
RG_BF16_TARGET void tile_kernel(int64_t kc, const uint16_t* a, const int64_t* row, int64_t pair_step,
                                const uint32_t* bp, Out* c, int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                float beta, bool first) {
  __m512 acc[kMR][2];
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const uint16_t* a_rows[kMR];
  for (int r = 0; r < kMR; ++r) a_rows[r] = a + row[r];
  const int64_t full = kc / 2;
  int64_t idx = 0;
  // Per pair: two vectors of B (32 columns x 2 k), six broadcasts of A, twelve dot products.
#pragma GCC unroll 2
  for (int64_t p = 0; p < full; ++p, idx += pair_step, bp += kNR) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m512bh x = broadcast_pair(load_pair(a_rows[r] + idx));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
    }
  }
  if (kc % 2 != 0) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m512bh x = broadcast_pair(pair_word(a_rows[r][idx], 0));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  const bool overwrite = first && beta == 0.0f;
  const __m512 vb = _mm512_set1_ps(first ? beta : 1.0f);
  const __mmask16 lanes[2] = {static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
                              static_cast<__mmask16>(cols >= 32   ? 0xFFFF
                                                     : cols <= 16 ? 0
                                                                  : (1u << (cols - 16)) - 1)};
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    if (r >= rows) break;
    Out* cr = c + r * ldc;
    for (int h = 0; h < 2; ++h) {
      const __m512 out = overwrite ? _mm512_mul_ps(va, acc[r][h])
                                   : _mm512_fmadd_ps(va, acc[r][h], _mm512_mul_ps(vb, load_c(cr + 16 * h, lanes[h])));
      store_c(cr + 16 * h, lanes[h], out);
    }
  }
}

template <class Out>
void bf16_gemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                       int64_t lda, const uint16_t* b, int64_t ldb, float beta, Out* c, int64_t ldc) {
  // Per thread (cpu::gemm runs blocks of one product on several pool threads at once), grown once.
  thread_local std::vector<uint32_t> packed_b;
  thread_local std::vector<uint32_t> packed_a;
  const int64_t pairs_max = (std::min(kKC, k) + 1) / 2;
  const int64_t nc_max = std::min(kNC, (n + kNR - 1) / kNR * kNR);
  if (static_cast<int64_t>(packed_b.size()) < pairs_max * nc_max) packed_b.resize(pairs_max * nc_max);
  if (trans_a && static_cast<int64_t>(packed_a.size()) < pairs_max * kMC) packed_a.resize(pairs_max * kMC);

  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t nc = std::min(kNC, n - j0);
    for (int64_t k0 = 0; k0 < k; k0 += kKC) {
      const int64_t kc = std::min(kKC, k - k0);
      const int64_t pairs = (kc + 1) / 2;
      const bool first = k0 == 0;
      pack_b(trans_b, b, ldb, k0, kc, j0, nc, packed_b.data());
      for (int64_t i0 = 0; i0 < m; i0 += kMC) {
        const int64_t mc = std::min(kMC, m - i0);
        if (trans_a) pack_a_transposed(a, lda, i0, mc, k0, kc, packed_a.data());
        for (int64_t s = 0; s * kNR < nc; ++s) {
          const uint32_t* bp = packed_b.data() + s * pairs * kNR;
          const int64_t cols = std::min(kNR, nc - s * kNR);
          Out* c_cols = c + j0 + s * kNR;
          for (int64_t i = i0; i < i0 + mc; i += kMR) {
            const int64_t rows = std::min(kMR, i0 + mc - i);
            int64_t row[kMR];
            const uint16_t* a_base;
            int64_t pair_step;
            if (trans_a) {
              a_base = reinterpret_cast<const uint16_t*>(packed_a.data() + (i - i0) * pairs);
              pair_step = 2 * kMR;
              for (int64_t r = 0; r < kMR; ++r) row[r] = 2 * r;
            } else {
              a_base = a + k0;
              pair_step = 2;
              // rows past m read row m - 1 again (in bounds); their results are not stored
              for (int64_t r = 0; r < kMR; ++r) row[r] = (i + std::min(r, rows - 1)) * lda;
            }
            tile_kernel(kc, a_base, row, pair_step, bp, c_cols + i * ldc, ldc, rows, cols, alpha, beta, first);
          }
        }
      }
    }
  }
}

}  // namespace

void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, float beta, uint16_t* c, int64_t ldc) {
  RG_CHECK(cpu_has_bf16_dot(), "bf16_gemm", "needs AVX512_BF16 with AVX-512 selected (RINGGRAD_ISA); this CPU ",
           cpu_supports(CpuIsa::avx512) ? "has AVX-512 but not AVX512_BF16, or AVX2 is selected" : "has no AVX-512");
  if (m <= 0 || n <= 0) return;
  auto c_at = [&](int64_t i, int64_t j) -> uint16_t& { return c[i * ldc + j]; };
  if (k <= 0 || alpha == 0.0f) {  // C = beta * C; as BLAS: A and B unread, beta == 0 overwrites (NaN too)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c_at(i, j) = beta == 0.0f ? 0 : float_to_bf16_bits(beta * bf16_bits_to_float(c_at(i, j)));
    return;
  }
  if (k <= kKC) return bf16_gemm_blocked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  // Deeper than one panel: accumulate alpha * AB in f32, then add beta * C and round once.
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < m * n) scratch.resize(m * n);
  bf16_gemm_blocked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, scratch.data(), n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float ab = scratch[i * n + j];
      c_at(i, j) = float_to_bf16_bits(beta == 0.0f ? ab : ab + beta * bf16_bits_to_float(c_at(i, j)));
    }
}

}  // namespace ringgrad::cpu
