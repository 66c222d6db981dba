// Causal self-attention in one pass per head, blocked with an online softmax: the probabilities are
// never stored (Note [Fused causal attention]). f32 with AVX-512 selected; the plain kernels of
// core/cpu/attention.cpp are its reference and run everywhere else.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/avx512_intrinsics.h"
#include "core/cpu/rows.h"
#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/parallel.h"

#if defined(__x86_64__)
#include "core/cpu/transpose8.h"
#endif

namespace ringgrad::cpu {

#if defined(__x86_64__)
namespace {

// Note [Fused causal attention]
// The plain kernels (core/cpu/attention.cpp) write each head's probabilities p = softmax(q k^T):
// (T, T) per head, 4 MiB per GPT-mini layer kept from the forward to the backward, and run each
// product as a call of the general GEMM on a 32-row block, whose packing and set-up cost as much as
// the multiply at these sizes (K = 32). Here a head is computed in panels that stay in L1 (32 query
// rows x up to 128 keys, or up to 128 query rows x 32 keys), by a register tile of its own, and
// nothing of size T x T outlives a panel:
//
// Forward (per head, per block of 32 queries; keys in panels of up to 128, up to the diagonal):
//   s = q k^T (k packed once per head as k^T, so 32 keys are 32 contiguous floats per d);
//   the online softmax: m_new = max(m, max_j scale s_j), e_j = exp(scale s_j - m_new),
//   l = l exp(m - m_new) + sum_j e_j, and the output rows so far scaled by exp(m - m_new);
//   o += e v (e with the dropout mask applied; l sums e without it).
//   At the end y = o / l, and lse = m + log l is kept per row: (B, H, T) floats, all the backward
//   needs beside q, k, v and y. Up to T = 128 a row is one panel, and nothing is rescaled.
// Backward (per head, per block of 32 keys; the queries from the diagonal down, in panels of 128):
//   p = exp(scale q k^T - lse) recomputed; dp' = dy v^T; dp = dp' with the mask;
//   ds = scale p (dp - D_i) with D_i = dy_i . y_i (= sum_j p'_ij dp'_ij: the row's dot of the
//   softmax backward, without the probabilities); dv += p'^T dy and dk += ds^T q (32 rows, the
//   whole panel of queries as their depth), dq += ds k into the head's dq rows. Five products
//   against the plain backward's four reading the stored p: the recomputed q k^T is the price of
//   not storing it.
// Causality: the panels stop at the diagonal, and on the diagonal block each group of 8 rows runs
// only the depth its rows can see (CausalK). The dropout mask is the plain kernels' (element (i, j)
// of head `item` is e = (item T + i) T + j), so both paths drop the same probabilities.
//
// The tile: 8 rows x 32 columns in sixteen zmm accumulators, two loads of b and eight broadcasts of
// a per k. Every operand of the five products is either row-major (q, dy, the panel's s / ds as a)
// or transposed (p^T, ds^T: a's row r is column r of the panel, k-step 32), and b is always rows of
// 32 contiguous floats at a row stride (v, k, q, dy straight from their tensors; the packed k^T and
// v^T), so one tile serves all of them without packing a or b per product.
//
// The sums run in another order than the plain kernels' (panels of keys, rescaled), so results
// differ in the last bits: the tests hold the fused kernel to the plain f32 kernels' own distance
// from an f64 run (tests/autograd/test_fused_attention.cpp).
constexpr int64_t kBlock = 32;    // queries (forward) or keys (backward) per block; the tile's width
constexpr int64_t kPanel = 128;   // keys (forward) or queries (backward) per panel
constexpr int64_t kTileRows = 8;  // rows of one register tile

// A row-major or transposed operand a of a product: element (r, kk) at base[r * row_step + kk *
// k_step]; rows past `rows` read row rows - 1 again (in bounds), and their results are not used.
struct TileOperand {
  const float* base;
  int64_t row_step, k_step, rows;
};

// c(8 x 32) = (kAccumulate: c +) a(8 x kc) b(kc x 32), b's row kk at b + kk * ldb.
template <bool kAccumulate>
__attribute__((target("avx512f"))) inline void tile(int64_t kc, const float* const* a_rows, int64_t a_step,
                                                    const float* b, int64_t ldb, float* c, int64_t ldc) {
  __m512 acc[kTileRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512 b0 = _mm512_loadu_ps(b + kk * ldb);
    const __m512 b1 = _mm512_loadu_ps(b + kk * ldb + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kTileRows; ++r) {
      const __m512 x = _mm512_set1_ps(a_rows[r][kk * a_step]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    for (int h = 0; h < 2; ++h) {
      float* out = c + r * ldc + 16 * h;
      _mm512_storeu_ps(out, kAccumulate ? _mm512_add_ps(acc[r][h], _mm512_loadu_ps(out)) : acc[r][h]);
    }
  }
}

// Which depth a group of 8 rows needs where the panel meets the diagonal; `offset` places the
// diagonal: it skips the k that multiply masked zeros.
enum class CausalK {
  all,
  up_to_row,  // rows are queries, k keys: row r sees k <= r + offset (e v, ds k)
  from_row,   // rows are keys, k queries: row r is seen by k >= r + offset (p^T dy, ds^T q)
};

// c(rows x width) = (or +=) a(rows x kc) b(kc x width); rows a multiple of 8, width of 32.
template <bool kAccumulate>
__attribute__((target("avx512f"))) inline void panel_product(const TileOperand& a, int64_t rows, int64_t kc,
                                                             const float* b, int64_t ldb, int64_t width, float* c,
                                                             int64_t ldc, CausalK causal = CausalK::all,
                                                             int64_t offset = 0) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int64_t k_begin = causal == CausalK::from_row ? std::clamp<int64_t>(r0 + offset, 0, kc) : 0;
    const int64_t k_end = causal == CausalK::up_to_row ? std::clamp<int64_t>(r0 + kTileRows + offset, 0, kc) : kc;
    const float* a_rows[kTileRows];
    for (int64_t r = 0; r < kTileRows; ++r)
      a_rows[r] = a.base + std::min(r0 + r, a.rows - 1) * a.row_step + k_begin * a.k_step;
    for (int64_t col = 0; col < width; col += kBlock)
      tile<kAccumulate>(k_end - k_begin, a_rows, a.k_step, b + k_begin * ldb + col, ldb, c + r0 * ldc + col, ldc);
  }
}

// One head's q, k, v (rows of D at stride ld = 3C).
struct Head {
  const float* q;
  const float* k;
  const float* v;
  int64_t n, D, ld, n_pad;  // n_pad: n rounded up to a block
};

// dst (D x n_pad) = src(n x D, rows at stride ld)^T, zero past column n: k^T or v^T for the tile's b.
// In 8 x 8 blocks through registers (D is a multiple of 8): a column walk would touch a new cache
// line of src per element.
__attribute__((target("avx512f"))) inline void transpose_head(const float* src, int64_t n, int64_t D, int64_t ld,
                                                              int64_t n_pad, float* dst) {
  int64_t j0 = 0;
  for (; j0 + 8 <= n; j0 += 8) {
    for (int64_t d0 = 0; d0 < D; d0 += 8) {
      __m256 block[8];
      for (int64_t r = 0; r < 8; ++r) block[r] = _mm256_loadu_ps(src + (j0 + r) * ld + d0);
      transpose8(block);
      for (int64_t r = 0; r < 8; ++r) _mm256_storeu_ps(dst + (d0 + r) * n_pad + j0, block[r]);
    }
  }
  for (int64_t d = 0; d < D; ++d) {
    float* row = dst + d * n_pad;
    for (int64_t j = j0; j < n; ++j) row[j] = src[j * ld + d];
    std::fill(row + n, row + n_pad, 0.0f);
  }
}

// The per-thread buffers, sized for the longest head of a call.
struct ForwardScratch {
  std::vector<float> kt, s, o, m, l;
  ForwardScratch(int64_t n_pad, int64_t D) : kt(D * n_pad), s(kBlock * kPanel), o(kBlock * D), m(kBlock), l(kBlock) {}
};

struct BackwardScratch {
  std::vector<float> kt, vt, dq, dk, dv, p, dropped, ds, dot;
  BackwardScratch(int64_t n_pad, int64_t D)
      : kt(D * n_pad),
        vt(D * n_pad),
        dq(n_pad * D),
        dk(kBlock * D),
        dv(kBlock * D),
        p(kPanel * kBlock),
        dropped(kPanel * kBlock),
        ds(kPanel * kBlock),
        dot(n_pad) {}
};

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The largest and the sum of a vector's 16 lanes (folding halves: AVX-512F shuffles only).
__attribute__((target("avx512f"))) inline float lanes_max(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // 256-bit halves swapped
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // 128-bit quarters swapped
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));        // pairs within each quarter
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));        // neighbours
  return _mm512_cvtss_f32(v);
}

__attribute__((target("avx512f"))) inline float lanes_sum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
  return _mm512_cvtss_f32(v);
}

// max of row[0..count), count >= 1; full loads of 16, the lanes past count masked in registers
// (masked loads across a cache line are slow on some CPUs).
__attribute__((target("avx512f"))) inline float row_max(const float* row, int64_t count) {
  const __m512 low = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 best = low;
  for (int64_t c0 = 0; c0 < count; c0 += 16)
    best = _mm512_max_ps(best, _mm512_mask_blend_ps(first_lanes(count - c0), low, _mm512_loadu_ps(row + c0)));
  return lanes_max(best);
}

// row[j] = exp(scale row[j] - shift) for j < count, 0 for count <= j < width (a multiple of 16);
// returns the sum.
__attribute__((target("avx512f"))) inline float exp_row(float* row, int64_t count, int64_t width, float scale,
                                                        float shift) {
  const int64_t computed = round_up(count, 16);
  for (int64_t j = 0; j < computed; ++j) row[j] = exp_of(scale * row[j] - shift);  // vectorises, 16 lanes
  __m512 sum = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < width; c0 += 16) {
    const __m512 e = _mm512_maskz_mov_ps(first_lanes(count - c0), _mm512_loadu_ps(row + c0));
    _mm512_storeu_ps(row + c0, e);
    sum = _mm512_add_ps(sum, e);
  }
  return lanes_sum(sum);
}

// Head `item`'s forward (item = b H + h in the whole batch: dropout's numbering): y rows at stride C,
// lse (n).
__attribute__((target("avx512f"), flatten)) void forward_head(const Head& h, float* y, int64_t C, float* lse,
                                                              int64_t item, float scale, const AttentionDropout& drop,
                                                              ForwardScratch& w) {
  const int64_t n = h.n, D = h.D, ld = h.ld;
  float* const s = w.s.data();
  float* const o = w.o.data();
  transpose_head(h.k, n, D, ld, h.n_pad, w.kt.data());
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t rows = std::min(kBlock, n - i0), seen = i0 + rows;  // keys [0, seen) are visible to some row
    std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<float>::infinity());
    std::fill(w.l.begin(), w.l.end(), 0.0f);
    std::fill(w.o.begin(), w.o.end(), 0.0f);
    for (int64_t p0 = 0; p0 < seen; p0 += kPanel) {
      const int64_t keys = std::min(kPanel, seen - p0), width = round_up(keys, kBlock);
      // s (32 x width) = q rows i0.. times k^T columns p0..
      panel_product<false>({h.q + i0 * ld, ld, 1, rows}, kBlock, D, w.kt.data() + p0, h.n_pad, width, s, kPanel);
      for (int64_t r = 0; r < rows; ++r) {  // the online softmax; row r sees keys up to i0 + r
        float* e = s + r * kPanel;
        const int64_t count = std::min(keys, i0 + r + 1 - p0);
        const float m_new = std::max(w.m[r], scale * row_max(e, count));  // scale > 0: the scaled row's max
        const float rescale = exp_of(w.m[r] - m_new);                     // 0 on the first panel (m = -inf)
        w.l[r] = w.l[r] * rescale + exp_row(e, count, width, scale, m_new);
        for (int64_t d = 0; d < D; ++d) o[r * D + d] *= rescale;
        w.m[r] = m_new;
        if (drop.rate > 0) apply_dropout(e, e, count, static_cast<uint64_t>((item * n + i0 + r) * n + p0), drop);
      }
      std::fill(s + rows * kPanel, s + kBlock * kPanel, 0.0f);
      // o (32 x D) += e (32 x keys) v rows p0..
      panel_product<true>({s, kPanel, 1, kBlock}, kBlock, keys, h.v + p0 * ld, ld, D, o, D, CausalK::up_to_row,
                          i0 - p0);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = 1.0f / w.l[r];
      for (int64_t d = 0; d < D; ++d) y[(i0 + r) * C + d] = o[r * D + d] * inv;
      lse[i0 + r] = w.m[r] + std::log(w.l[r]);
    }
  }
}

// Head `item`'s backward (item as in the forward): dq, dk, dv columns of dqkv (rows at stride ld), every element written.
__attribute__((target("avx512f"), flatten)) void backward_head(const Head& h, const float* dy, const float* y,
                                                               int64_t C, const float* lse, float* dq, int64_t item,
                                                               float scale, const AttentionDropout& drop,
                                                               BackwardScratch& w) {
  const int64_t n = h.n, D = h.D, ld = h.ld;
  float* const dk = dq + (h.k - h.q);
  float* const dv = dq + (h.v - h.q);
  float* const p = w.p.data();
  float* const ds = w.ds.data();
  transpose_head(h.k, n, D, ld, h.n_pad, w.kt.data());
  transpose_head(h.v, n, D, ld, h.n_pad, w.vt.data());
  for (int64_t i = 0; i < n; ++i)  // D_i = dy_i . y_i
    w.dot[i] = sum_lanes<float>(D, [&](int64_t d) { return dy[i * C + d] * y[i * C + d]; });
  std::fill(w.dot.begin() + n, w.dot.end(), 0.0f);
  std::fill(w.dq.begin(), w.dq.end(), 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t keys = std::min(kBlock, n - j0);
    std::fill(w.dk.begin(), w.dk.end(), 0.0f);
    std::fill(w.dv.begin(), w.dv.end(), 0.0f);
    for (int64_t q0 = j0; q0 < n; q0 += kPanel) {
      const int64_t queries = std::min(kPanel, n - q0), rows = round_up(queries, kTileRows);
      // p (rows x 32) = exp(scale q k^T - lse), recomputed; query q0 + r sees keys up to itself
      panel_product<false>({h.q + q0 * ld, ld, 1, queries}, rows, D, w.kt.data() + j0, h.n_pad, kBlock, p, kBlock);
      for (int64_t r = 0; r < queries; ++r)
        exp_row(p + r * kBlock, std::min(keys, q0 + r + 1 - j0), kBlock, scale, lse[q0 + r]);
      std::fill(p + queries * kBlock, p + rows * kBlock, 0.0f);
      // dp' = dy v^T
      panel_product<false>({dy + q0 * C, C, 1, queries}, rows, D, w.vt.data() + j0, h.n_pad, kBlock, ds, kBlock);
      const float* weights = p;  // what multiplied v: p, or p with the mask
      if (drop.rate > 0) {
        float* dropped = w.dropped.data();
        std::fill(dropped, dropped + rows * kBlock, 0.0f);
        for (int64_t r = 0; r < queries; ++r) {
          const uint64_t e0 = static_cast<uint64_t>((item * n + q0 + r) * n + j0);
          const int64_t count = std::min(keys, q0 + r + 1 - j0);
          apply_dropout(ds + r * kBlock, ds + r * kBlock, count, e0, drop);
          apply_dropout(p + r * kBlock, dropped + r * kBlock, count, e0, drop);
        }
        weights = dropped;
      }
      // dv (32 x D) += p'^T dy rows q0..; key j0 + r is seen from query j0 + r on
      panel_product<true>({weights, 1, kBlock, kBlock}, kBlock, queries, dy + q0 * C, C, D, w.dv.data(), D,
                          CausalK::from_row, j0 - q0);
      // ds = scale p (dp - D_i); 0 wherever p is
      for (int64_t r = 0; r < rows; ++r) {
        const float dot = w.dot[q0 + r];  // 0 past row n
        for (int64_t j = 0; j < kBlock; ++j)
          ds[r * kBlock + j] = scale * p[r * kBlock + j] * (ds[r * kBlock + j] - dot);
      }
      // dq rows q0.. += ds k rows j0..;  dk (32 x D) += ds^T q rows q0..
      panel_product<true>({ds, kBlock, 1, rows}, rows, keys, h.k + j0 * ld, ld, D, w.dq.data() + q0 * D, D,
                          CausalK::up_to_row, q0 - j0);
      panel_product<true>({ds, 1, kBlock, kBlock}, kBlock, queries, h.q + q0 * ld, ld, D, w.dk.data(), D,
                          CausalK::from_row, j0 - q0);
    }
    for (int64_t r = 0; r < keys; ++r) {
      std::copy_n(w.dk.data() + r * D, D, dk + (j0 + r) * ld);
      std::copy_n(w.dv.data() + r * D, D, dv + (j0 + r) * ld);
    }
  }
  for (int64_t i = 0; i < n; ++i) std::copy_n(w.dq.data() + i * D, D, dq + i * ld);
}

int64_t padded(int64_t n) { return round_up(n, kBlock); }

}  // namespace

bool fused_attention_available(int64_t head_dim) {
  return cpu_isa() == CpuIsa::avx512 && head_dim > 0 && head_dim % kBlock == 0;
}

void fused_attention_forward(const float* qkv, float* y, float* lse, int64_t B, int64_t n, int64_t C, int64_t H,
                             double scale, const AttentionDropout& drop, int64_t first_sample) {
  const int64_t D = C / H, ld = 3 * C;
  RG_CHECK(fused_attention_available(D), "causal_self_attention", "the fused kernel needs AVX-512 and a head size ",
           "that is a multiple of ", kBlock, ", got ", D);
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    ForwardScratch scratch(padded(n), D);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / H, head = item % H;
      const float* q = qkv + b * n * ld + head * D;
      forward_head({q, q + C, q + 2 * C, n, D, ld, padded(n)}, y + b * n * C + head * D, C, lse + item * n,
                   first_sample * H + item, static_cast<float>(scale), drop, scratch);
    }
  });
}

void fused_attention_backward(const float* dy, const float* qkv, const float* y, const float* lse, float* dqkv,
                              int64_t B, int64_t n, int64_t C, int64_t H, double scale, const AttentionDropout& drop,
                              int64_t first_sample) {
  const int64_t D = C / H, ld = 3 * C;
  // The CPU, not the selected ISA: the forward ran fused and kept no probabilities, whatever was
  // selected since.
  RG_CHECK(cpu_supports(CpuIsa::avx512) && D % kBlock == 0, "causal_self_attention_backward",
           "the fused kernel needs AVX-512 and a head size that is a multiple of ", kBlock, ", got ", D);
  parallel_for(B * H, 1, [&](int64_t lo, int64_t hi) {
    BackwardScratch scratch(padded(n), D);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / H, head = item % H;
      const int64_t at = b * n * ld + head * D, out = b * n * C + head * D;
      backward_head({qkv + at, qkv + at + C, qkv + at + 2 * C, n, D, ld, padded(n)}, dy + out, y + out, C,
                    lse + item * n, dqkv + at, first_sample * H + item, static_cast<float>(scale), drop, scratch);
    }
  });
}

#else  // not x86-64: the plain kernels run

bool fused_attention_available(int64_t) { return false; }

void fused_attention_forward(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t, double,
                             const AttentionDropout&, int64_t) {
  RG_CHECK(false, "causal_self_attention", "the fused kernel needs an x86-64 CPU with AVX-512");
}

void fused_attention_backward(const float*, const float*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                              int64_t, double, const AttentionDropout&, int64_t) {
  RG_CHECK(false, "causal_self_attention_backward", "the fused kernel needs an x86-64 CPU with AVX-512");
}

#endif

}  // namespace ringgrad::cpu
