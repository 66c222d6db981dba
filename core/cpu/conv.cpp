// Convolution and max pooling kernels on the CPU. The CUDA versions are in core/cuda/conv.cu.
//
// Note [Convolution one sample at a time]
// ---------------------------------------
// The CPU lowers a convolution to GEMMs (im2col), one sample n at a time:
//   cols_n (C·KH·KW, OH·OW)  every receptive field of sample n as a column (im2col_sample)
//   y_n (O, OH·OW)           = w (O, C·KH·KW) @ cols_n            written in place: y is NCHW
//   dw (O, C·KH·KW)         += dy_n (O, OH·OW) @ cols_n^T        cols_n rebuilt from x_n
//   dcols_n (C·KH·KW, OH·OW) = w^T @ dy_n, then col2im_sample adds it onto dx_n
// Why per sample and not one GEMM over the whole batch (cols (C·KH·KW, N·OH·OW)): W2's second conv
// at batch 64 made a 14 MB cols matrix, written, read by the GEMM and kept for the backward, all
// through DRAM, and the batch-wide product (O, N·OH·OW) had to be permuted to (N, O, OH, OW), as
// its gradient back: ~25% of a W2 step in im2col, col2im and those copies. One sample's cols_n
// (at most 288 x 196 floats there, 225 KB) stays in L2 between the im2col that writes it and the
// GEMM that reads it, and y_n, dy_n are NCHW slices already. Rebuilding cols_n for dw costs less
// than keeping the batch's.
// Threads: the samples are split over the pool, each thread with its own cols buffer and serial
// GEMMs; dw is summed per thread and the partial sums are added in thread order, so a result
// depends on the thread count (in the last bits) but not on scheduling.
//
// Dims: N batch, C input channels, O output channels, H/W input height/width, KH/KW kernel,
// OH/OW output height/width.
#include <algorithm>

#include <type_traits>
#include <vector>

#include "core/cpu/avx512_intrinsics.h"
#include "core/cpu/dispatch.h"
#include "core/cpu/gemm.h"
#include "core/cpu/im2col.h"
#include "core/cpu_isa.h"
#include "core/kernels.h"
#include "core/parallel.h"
#include "core/pool_math.h"

namespace ringgrad::cpu {
namespace {

template <class T>
void conv2d_forward_typed(const T* x, const T* w, T* y, const ConvGeometry& g) {
  const int64_t rows = g.rows(), pixels = g.oh * g.ow;
  for_each_sample<T>(g, sample_parts(g.n), [&](int64_t n, int64_t, bool, T* cols) {
    im2col_sample(x + n * g.c * g.h * g.w, cols, g);
    // y_n (O, OH·OW) = w (O, C·KH·KW) @ cols_n
    gemm_on_this_thread(dtype_of<T>(), false, false, g.o, pixels, rows, 1.0, w, rows, cols, pixels, 0.0,
                        y + n * g.o * pixels, pixels);
  });
}

template <class T>
void conv2d_backward_data_typed(const T* dy, const T* w, T* dx, const ConvGeometry& g) {
  const int64_t rows = g.rows(), pixels = g.oh * g.ow;
  for_each_sample<T>(g, sample_parts(g.n), [&](int64_t n, int64_t, bool, T* dcols) {
    // dcols_n (C·KH·KW, OH·OW) = w^T @ dy_n (O, OH·OW)
    gemm_on_this_thread(dtype_of<T>(), true, false, rows, pixels, g.o, 1.0, w, rows, dy + n * g.o * pixels, pixels, 0.0,
                        dcols, pixels);
    col2im_sample(dcols, dx + n * g.c * g.h * g.w, g);
  });
}

template <class T>
void conv2d_backward_filter_typed(const T* x, const T* dy, T* dw, const ConvGeometry& g) {
  // Every part has at least one sample (sample_parts), whose product overwrites its sum. Part 0 sums
  // into dw itself, the others into partials added afterwards in part order.
  const int64_t rows = g.rows(), pixels = g.oh * g.ow, parts = sample_parts(g.n);
  std::vector<T> partials(static_cast<size_t>((parts - 1) * g.o * rows));
  for_each_sample<T>(g, parts, [&](int64_t n, int64_t part, bool first, T* cols) {
    T* sum = part == 0 ? dw : partials.data() + (part - 1) * g.o * rows;
    im2col_sample(x + n * g.c * g.h * g.w, cols, g);
    // dw (O, C·KH·KW) += dy_n (O, OH·OW) @ cols_n^T
    gemm_on_this_thread(dtype_of<T>(), false, true, g.o, rows, pixels, 1.0, dy + n * g.o * pixels, pixels, cols, pixels,
                        first ? 0.0 : 1.0, sum, rows);
  });
  for (int64_t part = 1; part < parts; ++part) {
    const T* partial = partials.data() + (part - 1) * g.o * rows;
    for (int64_t i = 0; i < g.o * rows; ++i) dw[i] += partial[i];
  }
}

// ---- max pooling ---------------------------------------------------------------------------------------
#if defined(__x86_64__)
// One output row of the 2x2 / stride-2 pooling of floats with AVX-512, 16 outputs at a time: the
// rows r0, r1 of the window (input rows 2i, 2i + 1), into y[0 : ow) and argmax[0 : ow) (flat
// positions in the plane, `at` being that of r0[0]). The same selects in the same order as the
// scalar loop (first maximum wins, a NaN wins), so the result is the same bit for bit. The last
// group of fewer than 16 outputs is masked (W2's pooled rows are 14 and 7 wide: without masks they
// all took the scalar loop, ~14% of a step), so it writes the whole row and returns ow. Needs the
// plane to have fewer than 2^31 elements (the indices are formed in 32 bits).
__attribute__((target("avx512f"))) int64_t max_pool_2x2_row_avx512(const float* r0, const float* r1, float* y,
                                                                   int64_t* argmax, int64_t ow, int64_t w, int64_t at) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i one = _mm512_set1_epi32(1), below = _mm512_set1_epi32(static_cast<int>(w));
  const __m512i odd = _mm512_add_epi32(even, one);
  for (int64_t j = 0; j < ow; j += 16) {
    const int64_t n = std::min<int64_t>(16, ow - j);  // outputs in this group; inputs 2n per row
    const __mmask16 out_lanes = first_lanes(n), lo_lanes = first_lanes(2 * n), hi_lanes = first_lanes(2 * n - 16);
    const __m512 top_lo = _mm512_maskz_loadu_ps(lo_lanes, r0 + 2 * j);
    const __m512 top_hi = _mm512_maskz_loadu_ps(hi_lanes, r0 + 2 * j + 16);
    const __m512 bot_lo = _mm512_maskz_loadu_ps(lo_lanes, r1 + 2 * j);
    const __m512 bot_hi = _mm512_maskz_loadu_ps(hi_lanes, r1 + 2 * j + 16);
    const __m512 a = _mm512_permutex2var_ps(top_lo, even, top_hi), b = _mm512_permutex2var_ps(top_lo, odd, top_hi);
    const __m512 c = _mm512_permutex2var_ps(bot_lo, even, bot_hi), d = _mm512_permutex2var_ps(bot_lo, odd, bot_hi);
    // lane l: a = r0[2 (j + l)] at flat position at + 2 j + 2 l (= even[l]), b one to the right, c
    // and d one row (w) below
    const __m512i a_index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(at + 2 * j)), even);
    const __m512i c_index = _mm512_add_epi32(a_index, below);
    __m512i best_index = a_index;
    const __mmask16 take_b = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    __m512 best = _mm512_mask_blend_ps(take_b, a, b);
    best_index = _mm512_mask_add_epi32(best_index, take_b, best_index, one);
    const __mmask16 take_c = _mm512_cmp_ps_mask(c, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    best = _mm512_mask_blend_ps(take_c, best, c);
    best_index = _mm512_mask_blend_epi32(take_c, best_index, c_index);
    const __mmask16 take_d = _mm512_cmp_ps_mask(d, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    best = _mm512_mask_blend_ps(take_d, best, d);
    best_index = _mm512_mask_blend_epi32(take_d, best_index, _mm512_add_epi32(c_index, one));
    _mm512_mask_storeu_ps(y + j, out_lanes, best);
    _mm512_mask_storeu_epi64(argmax + j, static_cast<__mmask8>(out_lanes),
                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(best_index)));
    _mm512_mask_storeu_epi64(argmax + j + 8, static_cast<__mmask8>(out_lanes >> 8),
                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(best_index, 1)));
  }
  return ow;
}
#endif

// How many outputs of one pooled row the vector path above wrote (all, or 0 where it does not apply).
template <class T>
int64_t max_pool_2x2_row_vector(const T* r0, const T* r1, T* y, int64_t* argmax, int64_t ow, int64_t w, int64_t at,
                                int64_t plane) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == CpuIsa::avx512 && plane < (int64_t{1} << 31))
      return max_pool_2x2_row_avx512(r0, r1, y, argmax, ow, w, at);
  }
#endif
  (void)r0, (void)r1, (void)y, (void)argmax, (void)ow, (void)w, (void)at, (void)plane;
  return 0;
}

template <class T>
void max_pool_forward(const T* x, T* y, int64_t* argmax, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int64_t k, int64_t s, int64_t p) {
  // The common 2x2 window, stride 2, no padding: the same rule (first maximum wins, a NaN wins)
  // without the general loop's bounds checks -- the general loop made pooling ~20% of a CNN step.
  if (k == 2 && s == 2 && p == 0) {
    parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        const T* in = x + pl * h * w;
        for (int64_t i = 0; i < oh; ++i) {
          const T* r0 = in + 2 * i * w;
          const T* r1 = r0 + w;
          T* yr = y + (pl * oh + i) * ow;
          int64_t* ar = argmax + (pl * oh + i) * ow;
          for (int64_t j = max_pool_2x2_row_vector(r0, r1, yr, ar, ow, w, 2 * i * w, h * w); j < ow; ++j) {
            // selects, no branches: the loop vectorises
            const int64_t at = 2 * i * w + 2 * j;
            const T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
            const bool take_b = b > a || b != b;
            const T ab = take_b ? b : a;
            const int64_t iab = take_b ? at + 1 : at;
            const bool take_c = c > ab || c != c;
            const T abc = take_c ? c : ab;
            const int64_t iabc = take_c ? at + w : iab;
            const bool take_d = d > abc || d != d;
            yr[j] = take_d ? d : abc;
            ar[j] = take_d ? at + w + 1 : iabc;
          }
        }
      }
    });
    return;
  }
  parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* in = x + pl * h * w;
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          max_pool_window(in, h, w, i, j, k, s, p, &y[(pl * oh + i) * ow + j], &argmax[(pl * oh + i) * ow + j]);
    }
  });
}

}  // namespace

void conv2d_forward(DType dtype, const ConvShape& s, const void* x, const void* w, void* y) {
  dispatch_compute("conv2d", dtype, [&](auto tag) {
    using T = decltype(tag);
    conv2d_forward_typed(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), geometry(s));
  });
}

void conv2d_backward_data(DType dtype, const ConvShape& s, const void* dy, const void* w, void* dx) {
  dispatch_compute("conv2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    conv2d_backward_data_typed(static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx), geometry(s));
  });
}

void conv2d_backward_filter(DType dtype, const ConvShape& s, const void* x, const void* dy, void* dw) {
  dispatch_compute("conv2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    conv2d_backward_filter_typed(static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dw), geometry(s));
  });
}

void max_pool2d(DType dtype, const void* x, void* y, int64_t* indices, int64_t planes, int64_t H, int64_t W, int64_t OH,
                int64_t OW, int64_t kernel, int64_t stride, int64_t padding) {
  dispatch_compute("max_pool2d", dtype, [&](auto tag) {
    using T = decltype(tag);
    max_pool_forward(static_cast<const T*>(x), static_cast<T*>(y), indices, planes, H, W, OH, OW, kernel, stride,
                     padding);
  });
}

// Each output's gradient goes to the input position it took its maximum from.
void max_pool2d_backward(DType dtype, const void* dy, const int64_t* indices, void* dx, int64_t planes,
                         int64_t plane_in, int64_t plane_out) {
  dispatch_compute("max_pool2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = static_cast<const T*>(dy);
    T* dp = static_cast<T*>(dx);
    parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
      for (int64_t pl = begin; pl < end; ++pl) {
        T* plane = dp + pl * plane_in;
        for (int64_t i = 0; i < plane_in; ++i) plane[i] = 0;
        for (int64_t o = 0; o < plane_out; ++o) plane[indices[pl * plane_out + o]] += gp[pl * plane_out + o];
      }
    });
  });
}

}  // namespace ringgrad::cpu
