// The fused convolution block on the CPU: conv -> + bias -> ReLU -> 2 x 2 max pooling (stride 2),
// forward and backward, one sample at a time.
//
// Note [The fused convolution block]
// ----------------------------------
// Why: run as four ops (conv2d, relu, max_pool2d and their backwards), W2's block writes its
// convolution output (N, O, OH, OW) to memory, reads it back to add the bias, again for ReLU and
// again for the pooling, and in backward writes the pooling's scattered gradient, reads it for
// ReLU's mask and twice more for the two convolution products and the bias sum. Each of those passes
// runs at memory speed (max pooling at 7.6 GB/s: its loads wait on the ReLU output that just left
// L2), together about a fifth of a W2 step.
// What: the convolution already runs one sample at a time (Note [Convolution one sample at a time]
// in core/cpu/conv.cpp), so sample n's output y_n (O, OH·OW) -- at most 64 x 784 floats in W2, in
// L2 -- is pooled right after the GEMM that wrote it, and only the pooled output and each maximum's
// place in its window (one byte) leave the cache:
//   forward:  cols_n = im2col(x_n);  y_n = w @ cols_n;  pooled_n = maxpool(relu(y_n + b))
//   backward: dy_n = the pooled gradient routed to each window's maximum where pooled_n > 0,
//             zeros elsewhere (ReLU's mask: the maximum of ReLU outputs is positive exactly where
//             the chosen input was);
//             db += rows sums of dy_n;  dw += dy_n @ im2col(x_n)^T;  dx_n = col2im(w^T @ dy_n)
// The same GEMM calls on the same thread split as the plain kernels, the same single bias addition,
// the same ReLU and the same window rule (first maximum wins): pooled output, dx and dw are bit for
// bit the plain composition's. The bias gradient sums each sample's row in double and the samples
// in double as the plain reduction does, in another order, so it may differ in the last bit.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cpu/avx512_intrinsics.h"
#include "core/cpu/dispatch.h"
#include "core/cpu/gemm.h"
#include "core/cpu/im2col.h"
#include "core/cpu_isa.h"
#include "core/kernels.h"

namespace ringgrad::cpu {
namespace {

// A buffer of the calling thread, at least `size` elements.
template <class T>
T* thread_buffer(std::vector<T>& buffer, int64_t size) {
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

// ReLU as core/elementwise.h's ReluOp: x > 0 ? x : 0 (a NaN becomes 0, -0 becomes +0).
template <class T>
T relu_of(T x) {
  return x > T(0) ? x : T(0);
}

// One plane of y_n (OH, OW) -> (PH, PW) = (OH / 2, OW / 2) outputs max(relu(v + bias)) over each
// 2 x 2 window, and where in the window the maximum was (0 r0[2j], 1 r0[2j+1], 2 r1[2j], 3 r1[2j+1]
// for the window's rows r0, r1 = input rows 2i, 2i + 1). The first maximum in window order wins, as
// max_pool2d's rule; after ReLU no value is a NaN, so that rule needs no NaN case. The bias is added
// even when there is none (0): v + 0 differs from v only for -0, which ReLU makes +0 either way.
// Whole planes per call: a call per row (7 or 14 outputs in W2) spent much of its time entering.
template <class T>
void bias_relu_pool_plane(const T* plane, T bias, T* y, uint8_t* window, int64_t ph, int64_t pw, int64_t ow) {
  for (int64_t i = 0; i < ph; ++i, y += pw, window += pw) {
    const T* r0 = plane + 2 * i * ow;
    const T* r1 = r0 + ow;
    for (int64_t j = 0; j < pw; ++j) {
      const T a = relu_of(r0[2 * j] + bias), b = relu_of(r0[2 * j + 1] + bias);
      const T c = relu_of(r1[2 * j] + bias), d = relu_of(r1[2 * j + 1] + bias);
      T best = a;
      uint8_t at = 0;
      if (b > best) best = b, at = 1;
      if (c > best) best = c, at = 2;
      if (d > best) best = d, at = 3;
      y[j] = best;
      window[j] = at;
    }
  }
}

#if defined(__x86_64__)
// relu(v + shift) in 16 lanes: a compare and a masked move, so a NaN and -0 become +0 as in ReluOp.
__attribute__((target("avx512f"))) inline __m512 bias_relu_avx512(__m512 v, __m512 shift) {
  v = _mm512_add_ps(v, shift);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}

// The plane above for floats with AVX-512, 16 outputs at a time (the last group of a row masked:
// W2's pooled rows are 14 and 7 wide). The same additions, the same ReLU and the same selects:
// bit-identical to the scalar loop.
__attribute__((target("avx512f"))) void bias_relu_pool_plane_avx512(const float* plane, float bias, float* y,
                                                                    uint8_t* window, int64_t ph, int64_t pw,
                                                                    int64_t ow) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512 shift = _mm512_set1_ps(bias);
  for (int64_t i = 0; i < ph; ++i, y += pw, window += pw)
    for (int64_t j = 0; j < pw; j += 16) {
      const float* r0 = plane + 2 * i * ow;
      const float* r1 = r0 + ow;
      const int64_t n = std::min<int64_t>(16, pw - j);  // outputs in this group; inputs 2n per row
      const __mmask16 out_lanes = first_lanes(n);
      // Unmasked loads (the plane's buffer has 32 floats of slack past its end): masked loads that
      // cross a cache line ran several times slower here, and lanes past the row only reach outputs
      // that the masked stores below leave out.
      const __m512 top_lo = _mm512_loadu_ps(r0 + 2 * j), top_hi = _mm512_loadu_ps(r0 + 2 * j + 16);
      const __m512 bot_lo = _mm512_loadu_ps(r1 + 2 * j), bot_hi = _mm512_loadu_ps(r1 + 2 * j + 16);
      const __m512 a = bias_relu_avx512(_mm512_permutex2var_ps(top_lo, even, top_hi), shift);
      const __m512 b = bias_relu_avx512(_mm512_permutex2var_ps(top_lo, odd, top_hi), shift);
      const __m512 c = bias_relu_avx512(_mm512_permutex2var_ps(bot_lo, even, bot_hi), shift);
      const __m512 d = bias_relu_avx512(_mm512_permutex2var_ps(bot_lo, odd, bot_hi), shift);
      __m512 best = a;
      __m512i at = _mm512_setzero_si512();
      const __mmask16 take_b = _mm512_cmp_ps_mask(b, best, _CMP_GT_OQ);
      best = _mm512_mask_blend_ps(take_b, best, b);
      at = _mm512_mask_mov_epi32(at, take_b, _mm512_set1_epi32(1));
      const __mmask16 take_c = _mm512_cmp_ps_mask(c, best, _CMP_GT_OQ);
      best = _mm512_mask_blend_ps(take_c, best, c);
      at = _mm512_mask_mov_epi32(at, take_c, _mm512_set1_epi32(2));
      const __mmask16 take_d = _mm512_cmp_ps_mask(d, best, _CMP_GT_OQ);
      best = _mm512_mask_blend_ps(take_d, best, d);
      at = _mm512_mask_mov_epi32(at, take_d, _mm512_set1_epi32(3));
      _mm512_mask_storeu_ps(y + j, out_lanes, best);
      _mm512_mask_cvtepi32_storeu_epi8(window + j, out_lanes, at);
    }
}
#endif

template <class T>
void pool_plane(const T* plane, T bias, T* y, uint8_t* window, int64_t ph, int64_t pw, int64_t ow) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == CpuIsa::avx512) return bias_relu_pool_plane_avx512(plane, bias, y, window, ph, pw, ow);
  }
#endif
  bias_relu_pool_plane(plane, bias, y, window, ph, pw, ow);
}

// The backward of one plane: dy_n's plane (OH, OW), every element written -- the pooled gradient at
// each window's maximum where the pooled value is positive (ReLU's mask), zeros elsewhere (and in an
// odd last row or column). Returns the sum of what it routed, in double, for the bias gradient.
template <class T>
double unpool_plane(const T* pooled, const uint8_t* window, const T* dpooled, T* plane, int64_t ph, int64_t pw,
                    int64_t oh, int64_t ow) {
  std::fill(plane, plane + oh * ow, T(0));
  double sum = 0;
  for (int64_t i = 0; i < ph; ++i)
    for (int64_t j = 0; j < pw; ++j) {
      const int64_t p = i * pw + j;
      if (!(pooled[p] > T(0))) continue;
      const int place = window[p];
      plane[(2 * i + place / 2) * ow + 2 * j + place % 2] = dpooled[p];
      sum += static_cast<double>(dpooled[p]);
    }
  return sum;
}

#if defined(__x86_64__)
// g in the lanes whose window maximum was at place k, zero in the others.
__attribute__((target("avx512f"))) inline __m512 where_place(__m512i place, int k, __m512 g) {
  return _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(place, _mm512_set1_epi32(k)), g);
}

// The plane above for floats with AVX-512, 16 pooled outputs (32 columns of each of two rows) at a
// time: each of the four window places gets the masked gradient where the window's maximum was
// there, and pairs of places are interleaved into the two rows. The sum is in another order than
// the scalar loop's (lanes of doubles), which is why the bias gradient is not claimed bit for bit.
// `readable`: how many bytes of the window tensor there are from `window` on.
__attribute__((target("avx512f"))) double unpool_plane_avx512(const float* pooled, const uint8_t* window,
                                                              int64_t readable, const float* dpooled, float* plane,
                                                              int64_t ph, int64_t pw, int64_t oh, int64_t ow) {
  const __m512i first_half = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second_half = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
  for (int64_t i = 0; i < ph; ++i) {
    float* top = plane + 2 * i * ow;
    float* bottom = top + ow;
    for (int64_t j = 0; j < pw; j += 16) {
      const int64_t at = i * pw + j, n = std::min<int64_t>(16, pw - j);
      const __mmask16 in_lanes = first_lanes(n), lo_lanes = first_lanes(2 * n), hi_lanes = first_lanes(2 * n - 16);
      // 16 window bytes: straight from the tensor where 16 are there to read (the lanes past n
      // are masked off below), else through a copy (AVX-512F has no masked byte load). The copy is
      // the exception: written bytewise and read as one vector, it stalls store forwarding.
      alignas(16) uint8_t places[16] = {};
      const uint8_t* bytes = window + at;
      if (readable - at < 16) bytes = static_cast<const uint8_t*>(std::memcpy(places, bytes, static_cast<size_t>(n)));
      const __m512i place = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
      const bool whole = readable - at >= 16;  // 16 floats there to read as well (pooled, dpooled)
      const __m512 value = whole ? _mm512_loadu_ps(pooled + at) : _mm512_maskz_loadu_ps(in_lanes, pooled + at);
      const __mmask16 routed = _mm512_cmp_ps_mask(value, _mm512_setzero_ps(), _CMP_GT_OQ) & in_lanes;
      const __m512 g = _mm512_maskz_mov_ps(routed, whole ? _mm512_loadu_ps(dpooled + at)
                                                         : _mm512_maskz_loadu_ps(in_lanes, dpooled + at));
      sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(g)));
      sum_hi = _mm512_add_pd(sum_hi, _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_shuffle_f32x4(g, g, 0xEE))));
      const __m512 g0 = where_place(place, 0, g), g1 = where_place(place, 1, g);
      const __m512 g2 = where_place(place, 2, g), g3 = where_place(place, 3, g);
      _mm512_mask_storeu_ps(top + 2 * j, lo_lanes, _mm512_permutex2var_ps(g0, first_half, g1));
      _mm512_mask_storeu_ps(top + 2 * j + 16, hi_lanes, _mm512_permutex2var_ps(g0, second_half, g1));
      _mm512_mask_storeu_ps(bottom + 2 * j, lo_lanes, _mm512_permutex2var_ps(g2, first_half, g3));
      _mm512_mask_storeu_ps(bottom + 2 * j + 16, hi_lanes, _mm512_permutex2var_ps(g2, second_half, g3));
    }
    if (ow > 2 * pw) top[ow - 1] = bottom[ow - 1] = 0.0f;  // an odd last column
  }
  if (oh > 2 * ph) std::fill(plane + (oh - 1) * ow, plane + oh * ow, 0.0f);  // an odd last row
  alignas(64) double sums[8];
  _mm512_store_pd(sums, _mm512_add_pd(sum_lo, sum_hi));
  double sum = 0;
  for (const double part : sums) sum += part;
  return sum;
}
#endif

template <class T>
double unpool(const T* pooled, const uint8_t* window, int64_t readable, const T* dpooled, T* plane, int64_t ph,
              int64_t pw, int64_t oh, int64_t ow) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_isa() == CpuIsa::avx512)
      return unpool_plane_avx512(pooled, window, readable, dpooled, plane, ph, pw, oh, ow);
  }
#endif
  (void)readable;
  return unpool_plane(pooled, window, dpooled, plane, ph, pw, oh, ow);
}

template <class T>
void conv_block_forward_typed(const T* x, const T* w, const T* bias, T* pooled, uint8_t* window,
                              const ConvGeometry& g) {
  const int64_t rows = g.rows(), pixels = g.oh * g.ow, ph = g.oh / 2, pw = g.ow / 2;
  for_each_sample<T>(g, sample_parts(g.n), [&](int64_t n, int64_t, bool, T* cols) {
    thread_local std::vector<T> conv_buffer;
    // y_n (O, OH·OW), in cache until pooled; 32 elements of slack for the pooling's whole-vector reads
    T* y = thread_buffer(conv_buffer, g.o * pixels + 32);
    im2col_sample(x + n * g.c * g.h * g.w, cols, g);
    gemm_on_this_thread(dtype_of<T>(), false, false, g.o, pixels, rows, 1.0, w, rows, cols, pixels, 0.0, y, pixels);
    for (int64_t o = 0; o < g.o; ++o) {
      const T* plane = y + o * pixels;
      const int64_t out = (n * g.o + o) * ph * pw;
      pool_plane(plane, bias ? bias[o] : T(0), pooled + out, window + out, ph, pw, g.ow);
    }
  });
}

template <class T>
void conv_block_backward_typed(const T* x, const T* w, const T* pooled, const uint8_t* window, const T* dpooled, T* dx,
                               T* dw, T* dbias, const ConvGeometry& g) {
  const int64_t rows = g.rows(), pixels = g.oh * g.ow, ph = g.oh / 2, pw = g.ow / 2, parts = sample_parts(g.n);
  // dw: part 0 sums into dw itself, the others into partials added afterwards in part order, as
  // the plain filter gradient does. The bias gradient: one sum per (sample, channel) first.
  std::vector<T> partials(dw ? static_cast<size_t>((parts - 1) * g.o * rows) : 0);
  std::vector<T> sample_sums(dbias ? static_cast<size_t>(g.n * g.o) : 0);
  for_each_sample<T>(g, parts, [&](int64_t n, int64_t part, bool first, T* cols) {
    thread_local std::vector<T> grad_buffer;
    T* dy = thread_buffer(grad_buffer, g.o * pixels);  // dy_n (O, OH·OW), every element written
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t at = (n * g.o + o) * ph * pw;
      const double sum =
          unpool(pooled + at, window + at, g.n * g.o * ph * pw - at, dpooled + at, dy + o * pixels, ph, pw, g.oh, g.ow);
      if (dbias) sample_sums[static_cast<size_t>(n * g.o + o)] = static_cast<T>(sum);
    }
    if (dw) {
      T* sum = part == 0 ? dw : partials.data() + (part - 1) * g.o * rows;
      im2col_sample(x + n * g.c * g.h * g.w, cols, g);
      // dw (O, C·KH·KW) += dy_n (O, OH·OW) @ cols_n^T
      gemm_on_this_thread(dtype_of<T>(), false, true, g.o, rows, pixels, 1.0, dy, pixels, cols, pixels,
                          first ? 0.0 : 1.0, sum, rows);
    }
    if (dx) {
      // dcols_n (C·KH·KW, OH·OW) = w^T @ dy_n, into the cols buffer the filter product has used
      gemm_on_this_thread(dtype_of<T>(), true, false, rows, pixels, g.o, 1.0, w, rows, dy, pixels, 0.0, cols, pixels);
      col2im_sample(cols, dx + n * g.c * g.h * g.w, g);
    }
  });
  for (int64_t part = 1; dw && part < parts; ++part) {
    const T* partial = partials.data() + (part - 1) * g.o * rows;
    for (int64_t i = 0; i < g.o * rows; ++i) dw[i] += partial[i];
  }
  for (int64_t o = 0; dbias && o < g.o; ++o) {
    double sum = 0;
    for (int64_t n = 0; n < g.n; ++n) sum += static_cast<double>(sample_sums[static_cast<size_t>(n * g.o + o)]);
    dbias[o] = static_cast<T>(sum);
  }
}

}  // namespace

void conv_block_forward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* bias, void* pooled,
                        uint8_t* window) {
  dispatch_compute("conv2d_relu_max_pool2d", dtype, [&](auto tag) {
    using T = decltype(tag);
    conv_block_forward_typed(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                             static_cast<T*>(pooled), window, geometry(s));
  });
}

void conv_block_backward(DType dtype, const ConvShape& s, const void* x, const void* w, const void* pooled,
                         const uint8_t* window, const void* dpooled, void* dx, void* dw, void* dbias) {
  dispatch_compute("conv2d_relu_max_pool2d_backward", dtype, [&](auto tag) {
    using T = decltype(tag);
    conv_block_backward_typed(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(pooled), window,
                              static_cast<const T*>(dpooled), static_cast<T*>(dx), static_cast<T*>(dw),
                              static_cast<T*>(dbias), geometry(s));
  });
}

}  // namespace ringgrad::cpu
