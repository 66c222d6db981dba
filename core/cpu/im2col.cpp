// im2col and col2im, one sample at a time (core/cpu/im2col.h): the data movement of the CPU's
// convolutions, plain (core/cpu/conv.cpp) and fused (core/cpu/conv_block.cpp).
#include "core/cpu/im2col.h"

#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12 reports the self-initialised placeholder its AVX-512 intrinsics pass as the source of
// their unmasked forms (GCC bug 105593; see core/cpu/bf16_gemm.cpp). Nothing reads it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/cpu_isa.h"

namespace ringgrad::cpu {
namespace {

#if defined(__x86_64__)
// Stride-1 im2col and col2im with AVX-512, 16 columns at a time under masks: lanes j in [lo, hi)
// move x's row (x[y, j - p + kj]), the others are the padding's zeros. Many rows are short (W2's
// are 28 and 14 wide, 28 x 9 and 14 x 288 of them per sample), and element loops on them were ~11%
// (im2col) and ~5% (col2im) of a CNN step. The same copies and the same single additions as the
// scalar loops, so the results are bit-identical.
inline __mmask16 lanes_between(int64_t j0, int64_t lo, int64_t hi) {  // lanes l with lo <= j0 + l < hi
  const int64_t from = std::max<int64_t>(lo - j0, 0), to = std::min<int64_t>(hi - j0, 16);
  if (to <= from) return 0;
  const uint32_t upto = to >= 16 ? 0xFFFFu : (1u << to) - 1, below = (1u << from) - 1;
  return static_cast<__mmask16>(upto & ~below);
}

// One output-row block r = (c, ki, kj) of a stride-1 im2col: cols_r (OH, OW) from x's plane c.
// Whole blocks per call, so that the target attribute's call boundary is not paid per short row.
__attribute__((target("avx512f"))) void im2col_block_avx512(const float* plane, float* out, int64_t h, int64_t w,
                                                            int64_t oh, int64_t ow, int64_t padding, int64_t ki,
                                                            int64_t kj) {
  const int64_t lo = std::clamp<int64_t>(padding - kj, 0, ow), hi = std::clamp<int64_t>(w + padding - kj, lo, ow);
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t y = i - padding + ki;
    const bool inside = y >= 0 && y < h;
    const float* src = inside ? plane + y * w - padding + kj : plane;
    for (int64_t j0 = 0; j0 < ow; j0 += 16) {
      // outside the image (padding rows): every lane is a zero and nothing is read
      const __m512 v = _mm512_maskz_loadu_ps(inside ? lanes_between(j0, lo, hi) : 0, src + j0);
      _mm512_mask_storeu_ps(out + i * ow + j0, lanes_between(j0, 0, ow), v);
    }
  }
}

// The transpose of the above: adds cols_r (OH, OW) into dx's plane c.
__attribute__((target("avx512f"))) void col2im_block_avx512(const float* in, float* plane, int64_t h, int64_t w,
                                                            int64_t oh, int64_t ow, int64_t padding, int64_t ki,
                                                            int64_t kj) {
  const int64_t lo = std::clamp<int64_t>(padding - kj, 0, ow), hi = std::clamp<int64_t>(w + padding - kj, lo, ow);
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t y = i - padding + ki;
    if (y < 0 || y >= h) continue;
    const float* row = in + i * ow;
    float* dst = plane + y * w - padding + kj;
    for (int64_t j0 = lo / 16 * 16; j0 < hi; j0 += 16) {
      const __mmask16 m = lanes_between(j0, lo, hi);
      const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + j0), _mm512_maskz_loadu_ps(m, row + j0));
      _mm512_mask_storeu_ps(dst + j0, m, sum);
    }
  }
}
#endif

// Whether the stride-1 blocks of T take the AVX-512 helpers above.
template <class T>
bool rows_on_avx512() {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) return cpu_isa() == CpuIsa::avx512;
#endif
  return false;
}

// Block r = (c, ki, kj) of im2col (into) or col2im (!into) through the AVX-512 helpers, where
// rows_on_avx512 said so for a stride-1 convolution; false when it did nothing (the caller's scalar
// loop then runs).
template <class T>
bool block_on_avx512(bool vector_rows, bool into, const T* from, T* to, const ConvGeometry& g, int64_t ki, int64_t kj) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (!vector_rows) return false;
    if (into) im2col_block_avx512(from, to, g.h, g.w, g.oh, g.ow, g.padding, ki, kj);
    else col2im_block_avx512(from, to, g.h, g.w, g.oh, g.ow, g.padding, ki, kj);
    return true;
  }
#endif
  (void)vector_rows, (void)into, (void)from, (void)to, (void)g, (void)ki, (void)kj;
  return false;
}

}  // namespace

template <class T>
void im2col_sample(const T* x, T* cols, const ConvGeometry& g) {
  const bool vector_rows = g.stride == 1 && rows_on_avx512<T>();
  for (int64_t r = 0; r < g.rows(); ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const T* plane = x + c * g.h * g.w;
    T* out = cols + r * g.oh * g.ow;
    if (block_on_avx512(vector_rows, /*into=*/true, plane, out, g, ki, kj)) continue;
    for (int64_t i = 0; i < g.oh; ++i) {
      const int64_t y = i * g.stride - g.padding + ki;
      T* row = out + i * g.ow;
      if (y < 0 || y >= g.h) {
        for (int64_t j = 0; j < g.ow; ++j) row[j] = T(0);
        continue;
      }
      if (g.stride == 1) {  // columns [lo, hi) read x[y, j - p + kj]: zeros, one copy, zeros
        const int64_t lo = std::clamp<int64_t>(g.padding - kj, 0, g.ow);
        const int64_t hi = std::clamp<int64_t>(g.w + g.padding - kj, lo, g.ow);
        const T* src = plane + y * g.w - g.padding + kj;
        for (int64_t j = 0; j < lo; ++j) row[j] = T(0);
        for (int64_t j = lo; j < hi; ++j) row[j] = src[j];
        for (int64_t j = hi; j < g.ow; ++j) row[j] = T(0);
        continue;
      }
      for (int64_t j = 0; j < g.ow; ++j) {
        const int64_t xx = j * g.stride - g.padding + kj;
        row[j] = (xx >= 0 && xx < g.w) ? plane[y * g.w + xx] : T(0);
      }
    }
  }
}

template <class T>
void col2im_sample(const T* cols, T* dx, const ConvGeometry& g) {
  const bool vector_rows = g.stride == 1 && rows_on_avx512<T>();
  std::fill(dx, dx + g.c * g.h * g.w, T(0));
  for (int64_t r = 0; r < g.rows(); ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const T* in = cols + r * g.oh * g.ow;
    T* plane = dx + c * g.h * g.w;
    if (block_on_avx512(vector_rows, /*into=*/false, in, plane, g, ki, kj)) continue;
    for (int64_t i = 0; i < g.oh; ++i) {
      const int64_t y = i * g.stride - g.padding + ki;
      if (y < 0 || y >= g.h) continue;
      const T* row = in + i * g.ow;
      if (g.stride == 1) {  // the valid columns form one run: a vectorisable add
        const int64_t lo = std::clamp<int64_t>(g.padding - kj, 0, g.ow);
        const int64_t hi = std::clamp<int64_t>(g.w + g.padding - kj, lo, g.ow);
        T* dst = plane + y * g.w - g.padding + kj;
        for (int64_t j = lo; j < hi; ++j) dst[j] += row[j];
        continue;
      }
      for (int64_t j = 0; j < g.ow; ++j) {
        const int64_t xx = j * g.stride - g.padding + kj;
        if (xx >= 0 && xx < g.w) plane[y * g.w + xx] += row[j];
      }
    }
  }
}

template void im2col_sample<float>(const float*, float*, const ConvGeometry&);
template void im2col_sample<double>(const double*, double*, const ConvGeometry&);
template void col2im_sample<float>(const float*, float*, const ConvGeometry&);
template void col2im_sample<double>(const double*, double*, const ConvGeometry&);

}  // namespace ringgrad::cpu
